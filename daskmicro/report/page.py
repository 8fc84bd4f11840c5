"""Shared pieces of the self-contained HTML pages (the run report and the sweep page).

Inline CSS, the two inline scripts that record JS errors and rendered plots as attributes of
``<body>``, and the escaping/formatting of report values.  Pure functions, no file access.
"""

from __future__ import annotations

import html
import json
import math
from typing import Any, Mapping

__all__ = ["CSS", "HEAD_SCRIPT", "TAIL_SCRIPT", "esc", "fmt", "table"]

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Arial,sans-serif;margin:0;color:#222;background:#f6f7f9}
header{background:#27415e;color:#fff;padding:1.2em 2em}
header h1{margin:0 0 .2em 0;font-size:1.6em}
header p{margin:.1em 0;opacity:.9}
nav{padding:.6em 2em;background:#e8ecf1;font-size:.9em}
nav a{margin-right:1em;color:#27415e;text-decoration:none}
main{padding:1em 2em;max-width:1100px}
section{background:#fff;border:1px solid #dde2e8;border-radius:6px;padding:.8em 1.4em;margin:1em 0}
h2{font-size:1.2em;margin:.3em 0 .6em 0;color:#27415e}
table{border-collapse:collapse;margin:.4em 0;font-size:.92em}
th,td{border-bottom:1px solid #e3e6ea;padding:.25em .9em .25em 0;text-align:left;vertical-align:top}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.notrun{color:#888;font-style:italic}
.badge{display:inline-block;padding:.15em .6em;border-radius:3px;font-weight:bold}
.pass{background:#d4edda;color:#155724}.fail{background:#f8d7da;color:#721c24}
svg.plot{max-width:100%;height:auto;display:block;margin:.4em 0}
footer{color:#777;font-size:.85em;padding:1em 2em}
"""

# Reports JS errors and which plots got a non-empty box, as attributes of <body>; the page works
# the same without it (the HTML test reads them through Chromium's --dump-dom).
HEAD_SCRIPT = (
    "window.__reportErrors=[];"
    "window.addEventListener('error',function(e){window.__reportErrors.push(String(e.message));});"
)
TAIL_SCRIPT = (
    "(function(){var n=0,p=document.querySelectorAll('svg.plot');"
    "for(var i=0;i<p.length;i++){var b=p[i].getBoundingClientRect();if(b.width>0&&b.height>0){n++;}}"
    "document.body.setAttribute('data-plots-rendered',String(n));"
    "document.body.setAttribute('data-js-errors',String(window.__reportErrors.length));})();"
)


def esc(value: Any) -> str:
    """HTML-escaped text of a value (quotes too)."""
    return html.escape(str(value), quote=True)


def fmt(value: Any) -> str:
    """Human-readable, escaped rendering of a report value."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return esc(value)
        if value == 0 or 1e-3 <= abs(value) < 1e6:
            return f"{value:.4g}" if abs(value) < 1 else f"{value:,.4f}".rstrip("0").rstrip(".")
        return f"{value:.3e}"
    if isinstance(value, (list, tuple)):
        items = [fmt(v) for v in value[:20]]
        return ", ".join(items) + (f", … ({len(value)} in all)" if len(value) > 20 else "")
    if isinstance(value, Mapping):
        return esc(json.dumps(value, default=str, ensure_ascii=False))
    return esc(value)


def table(rows, header=None) -> str:
    """An HTML table of ``rows`` (numbers right-aligned after the first column), each cell through :func:`fmt`."""
    out = ["<table>"]
    if header:
        out.append("<tr>" + "".join(f"<th>{esc(h)}</th>" for h in header) + "</tr>")
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            numeric = i > 0 and isinstance(cell, (int, float)) and not isinstance(cell, bool)
            cells.append(f"<td class=\"num\">{fmt(cell)}</td>" if numeric else f"<td>{fmt(cell)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</table>")
    return "".join(out)
