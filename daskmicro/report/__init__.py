"""Run reports: JSON metrics of an anonymization run and the self-contained HTML page.

The run's report is assembled by :mod:`.run_report` (with the exact-MDAV yardstick of
:mod:`.reference`) into a :class:`Report`; :mod:`.html` draws it, :mod:`.sweep_page` draws a
trade-off sweep (:mod:`daskmicro.tuning`).
"""

from .files import find_report, write_report
from .html import render_html
from .plots import sweep_plot
from .run import Report
from ..tuning.points import recommend_setting

__all__ = ["Report", "render_html", "write_report", "find_report", "sweep_plot", "recommend_setting"]
