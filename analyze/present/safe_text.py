"""Text and JSON that are safe to print, whatever a trace or a preset file holds.

`safe(text)` is for the terminal: module names, op names, paths and preset strings come from
files a user may not control, and an escape sequence in one (`\\x1b]52;...`, `\\x1b[2J`) would
reach the terminal. Every control character (C0, DEL, C1) but newline and tab, and the
Unicode bidirectional overrides that reorder what is shown, is written as its escape
(`\\x1b`, `\\u202e`): the text stays readable and two names that differ only there stay
distinct. Tables are built from `safe` cells; JSON and CSV keep the exact strings.

`json_text(document)` is for `--format json`: JSON has no Infinity or NaN (Python's json
writes them, and strict parsers refuse the document). A number that is not finite is an
error naming its key, never silently null: a NaN or an infinite energy means something went
wrong upstream, and a script reading the document must not take it for "no value". Values
that are legitimately missing are None (null) before they get here (diff's relative change
of a new metric, a SQL NULL); a NaN read from the data itself (`spiketrace sql`) is an error
too, whose message says how to get it (CSV, or `isnan()` in the query).
"""

from __future__ import annotations

import json
import math
import numbers
import re
from collections.abc import Mapping
from typing import Any

# C0 but tab and newline, DEL, C1; the bidi embeddings, overrides and isolates; LRM, RLM, ALM
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]")


def _escape(found: re.Match) -> str:
    code = ord(found.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe(text: Any) -> str:
    """`text` (made a str) with its control characters shown as escapes; newlines and tabs kept."""
    return _UNSAFE.sub(_escape, text if isinstance(text, str) else str(text))


def safe_line(text: Any) -> str:
    """`safe(text)` on one line: newlines and tabs escaped too (a cell, a name in a message)."""
    return safe(text).replace("\n", "\\n").replace("\t", "\\t")


class NonFiniteError(ValueError):
    """A value for JSON output is not a finite number; the message names its key."""


def _key(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def non_finite(document: Any, path: str = "") -> tuple[str, Any] | None:
    """(key path, value) of the first number in `document` that is not finite, or None.
    Keys are dotted (`energy_by_stage.forward`), list items indexed (`rows[3].pj`)."""
    stack = [(document, path)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, float) or (isinstance(node, numbers.Real) and not isinstance(node, numbers.Integral)):
            if not math.isfinite(float(node)):
                return where or "(the document)", node
        elif isinstance(node, Mapping):
            stack.extend((value, _key(where, key)) for key, value in reversed(list(node.items())))
        elif isinstance(node, (list, tuple)):
            stack.extend((value, f"{where}[{i}]") for i, value in reversed(list(enumerate(node))))
    return None


def json_text(document: Any, *, hint: str = "", **options) -> str:
    """`json.dumps(document, **options)` that refuses NaN and Infinity, naming the key.
    `hint` ends the message (e.g. how to get the data another way)."""
    found = non_finite(document)
    if found is not None:
        where, value = found
        raise NonFiniteError(f"JSON output: {safe_line(where)} is {value}, not a finite number "
                             f"(JSON has no NaN or Infinity){'; ' + hint if hint else ''}")
    try:
        return json.dumps(document, allow_nan=False, **options)
    except ValueError as problem:  # a non-finite value only `default` turned into a number
        raise NonFiniteError(f"JSON output: {problem}{'; ' + hint if hint else ''}") from None
