"""Reading a preset file: a regular file of at most MAX_FILE_BYTES of UTF-8 TOML. Anything else
(a directory, a FIFO that would block, a device, binary data, TOML nested beyond Python's
recursion limit, an integer of thousands of digits) is one PresetError naming the file, and
for a TOML syntax error the line's key."""

from __future__ import annotations

import os
import re
import stat
import tomllib
from collections.abc import Mapping
from pathlib import Path

from spiketrace.analyze.presets.checks import PresetError

MAX_FILE_BYTES = 1 << 20
_TOML_AT = re.compile(r"\(at line (\d+), column \d+\)")


def read_document(path: Path) -> Mapping:
    """The TOML document at `path`: a regular file of at most MAX_FILE_BYTES of UTF-8 text."""
    try:
        status = os.stat(path)
    except FileNotFoundError:
        raise PresetError(f"{path}: no such preset file") from None
    except OSError as problem:
        raise PresetError(f"{path}: cannot read the preset file ({problem.strerror})") from None
    if not stat.S_ISREG(status.st_mode):
        raise PresetError(f"{path}: not a regular file")
    if status.st_size > MAX_FILE_BYTES:
        raise PresetError(f"{path}: {status.st_size} bytes, more than a preset's {MAX_FILE_BYTES}")
    try:
        text = path.read_bytes()[:MAX_FILE_BYTES + 1].decode("utf-8")
    except UnicodeDecodeError:
        raise PresetError(f"{path}: not UTF-8 text") from None
    except OSError as problem:
        raise PresetError(f"{path}: cannot read the preset file ({problem.strerror})") from None
    try:
        return tomllib.loads(text)
    except RecursionError:  # the key is on the line that opens the most arrays and tables
        line = max(text.splitlines() or [""], key=lambda line: line.count("[") + line.count("{"))
        raise PresetError(f"{path}: not valid TOML: nested too deeply{_near(line)}") from None
    except ValueError as problem:  # TOMLDecodeError, or an integer of thousands of digits
        found = _TOML_AT.search(str(problem))
        lines = text.splitlines()
        if found and int(found.group(1)) <= len(lines):
            line = lines[int(found.group(1)) - 1]
        else:  # an integer of thousands of digits: the line that holds it
            line = max(lines or [""], key=lambda line: max(map(len, re.findall(r"\d+", line)), default=0))
        raise PresetError(f"{path}: not valid TOML: {str(problem).splitlines()[0][:200]}{_near(line)}") from None


def _near(line: str) -> str:
    """' (key 'NAME')' for a `NAME = ...` line, else ''."""
    key = line.split("=", 1)[0].strip() if "=" in line else ""
    return f" (key {key[:80]!r})" if key else ""
