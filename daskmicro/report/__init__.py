"""Run reports: JSON metrics of an anonymization run and the self-contained HTML page."""

from .html import render_html, write_report
from .plots import recommend_setting, sweep_plot
from .run import Report

__all__ = ["Report", "render_html", "write_report", "sweep_plot", "recommend_setting"]
