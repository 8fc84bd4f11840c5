"""Shared pieces of the self-contained HTML pages (the run report and the sweep page).

Inline CSS, the two inline scripts that record JS errors and rendered plots as attributes of
``<body>``, and the escaping/formatting of report values.  Pure functions, no file access.
"""

from __future__ import annotations

import html
import json
import math
from typing import Any, Mapping

__all__ = ["CSS", "HEAD_SCRIPT", "TAIL_SCRIPT", "esc", "fmt", "number", "seconds", "percent", "table"]

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Arial,sans-serif;margin:0;color:#222;background:#f6f7f9;line-height:1.45}
header{background:#27415e;color:#fff;padding:1.2em 2em}
header h1{margin:0 0 .2em 0;font-size:1.6em}
header p{margin:.1em 0;opacity:.9}
nav{padding:.6em 2em;background:#e8ecf1;font-size:.9em}
nav a{margin-right:1em;color:#27415e;text-decoration:none}
main{padding:1em 2em;max-width:1280px}
section{background:#fff;border:1px solid #dde2e8;border-radius:6px;padding:.8em 1.4em;margin:1em 0}
h2{font-size:1.2em;margin:.3em 0 .6em 0;color:#27415e}
h3{font-size:1.02em;margin:.9em 0 .3em 0;color:#27415e}
table{border-collapse:collapse;margin:.4em 0;font-size:.92em}
th,td{border-bottom:1px solid #e3e6ea;padding:.25em .9em .25em 0;text-align:left;vertical-align:top}
td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.total td{font-weight:bold;border-top:2px solid #aab4c0}
.note{color:#555;font-size:.92em}
.badge{display:inline-block;padding:.15em .6em;border-radius:3px;font-weight:bold}
.pass{background:#d4edda;color:#155724}.fail{background:#f8d7da;color:#721c24}
.verdicts{display:grid;grid-template-columns:repeat(auto-fit,minmax(280px,1fr));gap:1em}
.verdict{border-left:5px solid #3465a4;padding:.2em 1em;background:#f7f9fc}
.verdict.good{border-color:#2e8b57}.verdict.bad{border-color:#c0392b}
.verdict h3{margin-top:.3em}
dl.glossary dt{font-weight:bold;margin-top:.5em}
dl.glossary dd{margin-left:1.5em}
svg.plot{width:100%;height:auto;display:block;margin:.4em 0}
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


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def number(value: float, digits: int = 4) -> str:
    """A float for people: ``digits`` significant digits in plain notation, ``≈ 0`` for rounding
    noise (|v| < 1e-12), ``3.5 × 10⁻⁸`` for tiny and huge values, never ``e-04``."""
    v = float(value)
    if not math.isfinite(v):
        return "not a number" if math.isnan(v) else ("∞" if v > 0 else "−∞")
    if v == 0:
        return "0"
    a = abs(v)
    if a < 1e-12:
        return "≈ 0"
    if a < 1e-4 or a >= 1e15:
        exp = math.floor(math.log10(a))
        mant = v / 10 ** exp
        return f"{mant:.{max(digits - 3, 1)}f} × 10{str(exp).translate(_SUPERSCRIPT)}"
    if a >= 1e6:
        return f"{v:,.0f}"
    decimals = max(digits - 1 - math.floor(math.log10(a)), 0)
    text = f"{v:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def seconds(value) -> str:
    """A duration for people: ``< 0.001 s``, ``0.0421 s``, ``12.3 s``, ``2 min 05 s``, ``1 h 02 min``."""
    if value is None:
        return "—"
    v = float(value)
    if not math.isfinite(v) or v < 0:
        return "—"
    if v < 0.001:
        return "< 0.001 s"
    if v < 60:
        return f"{number(v, 3)} s"
    if v < 3600:
        return f"{int(v // 60)} min {int(round(v % 60)):02d} s"
    return f"{int(v // 3600)} h {int(round(v % 3600 / 60)):02d} min"


def percent(fraction, digits: int = 3) -> str:
    """A fraction as a percentage for people (``0.038`` → ``3.8 %``)."""
    return "—" if fraction is None else f"{number(100 * float(fraction), digits)} %"


def fmt(value: Any) -> str:
    """Human-readable, escaped rendering of a report value."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return esc(number(value))
    if isinstance(value, (list, tuple)):
        items = [fmt(v) for v in value[:20]]
        return ", ".join(items) + (f", … ({len(value)} in all)" if len(value) > 20 else "")
    if isinstance(value, Mapping):
        return esc(json.dumps(value, default=str, ensure_ascii=False))
    return esc(value)


def table(rows, header=None, cls=None) -> str:
    """An HTML table of ``rows`` (numbers right-aligned after the first column), each cell through
    :func:`fmt`; a row whose first cell starts with ``"total"`` is set apart."""
    out = [f'<table class="{esc(cls)}">' if cls else "<table>"]
    if header:
        out.append("<tr>" + "".join(f"<th>{esc(h)}</th>" for h in header) + "</tr>")
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            numeric = i > 0 and isinstance(cell, (int, float)) and not isinstance(cell, bool)
            cells.append(f"<td class=\"num\">{fmt(cell)}</td>" if numeric else f"<td>{fmt(cell)}</td>")
        total = bool(row) and str(row[0]).startswith("total")
        out.append(("<tr class=\"total\">" if total else "<tr>") + "".join(cells) + "</tr>")
    out.append("</table>")
    return "".join(out)
