"""Row filters for lake input: a small, safe expression syntax turned into pyarrow expressions.

Grammar (no ``eval``; a hand-written tokenizer and parser)::

    filter  := clause (("and" | ";") clause)*
    clause  := NAME OP VALUE | NAME ["not"] "in" "(" VALUE ("," VALUE)* ")"
    OP      := "==" | "=" | "!=" | "<" | "<=" | ">" | ">="
    VALUE   := number | 'quoted text' | "quoted text" | bare-word

Examples: ``year>=2020``, ``region in (north, south)``, ``year >= 2020 and region != 'east'``.
Values are converted to the type of the column (numbers for numeric columns, text for text
columns); a column that is not in the input, or a value that does not fit its column, is an
:class:`~daskmicro.errors.ParameterError` naming the filter.
"""

from __future__ import annotations

import re

from ..errors import ParameterError

__all__ = ["parse_filter", "parse_filters"]

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<op>==|!=|<=|>=|=|<|>)
      | (?P<punct>[(),;])
      | '(?P<sq>[^']*)'
      | "(?P<dq>[^"]*)"
      | (?P<word>[^\s(),;=!<>'"]+)
    )""",
    re.VERBOSE,
)

_OPS = {"==": "__eq__", "=": "__eq__", "!=": "__ne__", "<": "__lt__", "<=": "__le__", ">": "__gt__", ">=": "__ge__"}


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ParameterError(f"--filter {text!r}: cannot parse at position {pos + 1}")
        pos = m.end()
        kind = m.lastgroup
        value = m.group(kind)
        out.append(("str" if kind in ("sq", "dq") else kind, value))
    return out


def _convert(value: tuple[str, str], field, text: str):
    import pyarrow as pa

    kind, raw = value
    t = field.type
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        try:
            number = float(raw)
        except ValueError:
            raise ParameterError(f"--filter {text!r}: column {field.name!r} is numeric, got a non-number") from None
        if pa.types.is_integer(t) and number.is_integer():
            return int(number)
        return number
    if pa.types.is_boolean(t):
        if raw.lower() in ("true", "1"):
            return True
        if raw.lower() in ("false", "0"):
            return False
        raise ParameterError(f"--filter {text!r}: column {field.name!r} is boolean, use true or false")
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return raw
    raise ParameterError(f"--filter {text!r}: column {field.name!r} of type {t} cannot be filtered")


def parse_filter(text: str, schema):
    """Parse one filter string into a :class:`pyarrow.dataset.Expression` over ``schema``.

    Parameters
    ----------
    text : str
        The filter, e.g. ``"year>=2020 and region in (a,b)"``.
    schema : pyarrow.Schema
        Schema of the input (partition keys included): names the columns and their types.

    Returns
    -------
    pyarrow.dataset.Expression

    Raises
    ------
    ParameterError
        Syntax errors, unknown columns, values that do not fit the column type.
    """
    import pyarrow.dataset as ds

    toks = _tokens(str(text))
    if not toks:
        raise ParameterError("--filter: empty expression")
    i, clauses = 0, []

    def take(expect=None):
        nonlocal i
        if i >= len(toks):
            raise ParameterError(f"--filter {text!r}: unexpected end")
        tok = toks[i]
        if expect is not None and tok[1].lower() != expect:
            raise ParameterError(f"--filter {text!r}: expected {expect!r}")
        i += 1
        return tok

    while True:
        kind, name = take()
        if kind not in ("word", "str"):
            raise ParameterError(f"--filter {text!r}: expected a column name")
        if name not in schema.names:
            raise ParameterError(f"--filter {text!r}: unknown column {name!r}")
        field = schema.field(name)
        kind, op = take()
        negate = False
        if kind == "word" and op.lower() == "not":
            negate = True
            kind, op = take("in")
        if kind == "word" and op.lower() == "in":
            take("(")
            values = []
            while True:
                tok = take()
                if tok[0] not in ("word", "str"):
                    raise ParameterError(f"--filter {text!r}: expected a value in the list")
                values.append(_convert(tok, field, text))
                if take()[1] == ")":
                    break
                if toks[i - 1][1] != ",":
                    raise ParameterError(f"--filter {text!r}: expected ',' or ')' in the list")
            expr = ds.field(name).isin(values)
            clauses.append(~expr if negate else expr)
        elif kind == "op":
            tok = take()
            if tok[0] not in ("word", "str"):
                raise ParameterError(f"--filter {text!r}: expected a value after {op!r}")
            clauses.append(getattr(ds.field(name), _OPS[op])(_convert(tok, field, text)))
        else:
            raise ParameterError(f"--filter {text!r}: expected an operator after {name!r}")
        if i == len(toks):
            break
        kind, sep = take()
        if not (sep == ";" or (kind == "word" and sep.lower() == "and")):
            raise ParameterError(f"--filter {text!r}: expected 'and' between conditions")
    expr = clauses[0]
    for c in clauses[1:]:
        expr = expr & c
    return expr


def parse_filters(texts, schema):
    """AND of several filter strings (each :func:`parse_filter`); None when there are none."""
    expr = None
    for text in texts or ():
        e = parse_filter(text, schema)
        expr = e if expr is None else expr & e
    return expr
