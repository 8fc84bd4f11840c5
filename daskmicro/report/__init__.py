"""Run reports: JSON metrics of an anonymization run and the self-contained HTML page."""

from .files import find_report, write_report
from .html import render_html
from .plots import recommend_setting, sweep_plot
from .run import Report

__all__ = ["Report", "render_html", "write_report", "find_report", "sweep_plot", "recommend_setting"]
