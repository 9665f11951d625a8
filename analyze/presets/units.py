"""The units a preset's numbers may carry, and conversion between them.

A unit is a simple unit (pJ, bit, ns, mm2, MHz, ...) or a ratio of two ('pJ/bit',
'bit/cycle'); two units convert when their dimensions match. Spelling is strict: ASCII
letters and digits, at most one '/', no spaces ('pJ/' and 'pJ / bit' are refused).
"""

from __future__ import annotations

import re

# unit -> (dimension, factor to the dimension's base unit)
_ENERGY = {"fJ": 1e-3, "pJ": 1.0, "nJ": 1e3, "uJ": 1e6, "mJ": 1e9, "J": 1e12}
_SIZE = {"bit": 1, "byte": 8, "B": 8, "KiB": 8 * 2**10, "MiB": 8 * 2**20, "GiB": 8 * 2**30,
         "kB": 8e3, "MB": 8e6, "GB": 8e9}
_TIME = {"ps": 1e-12, "ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
_AREA = {"um2": 1e-6, "mm2": 1.0, "cm2": 100.0}
_SIMPLE = {**{u: ("energy", f) for u, f in _ENERGY.items()}, **{u: ("size", f) for u, f in _SIZE.items()},
           **{u: ("time", f) for u, f in _TIME.items()}, **{u: ("area", f) for u, f in _AREA.items()},
           "1": ("dimensionless", 1.0), "cycle": ("cycle", 1.0), "MHz": ("frequency", 1e6),
           "GHz": ("frequency", 1e9), "Hz": ("frequency", 1.0), "nm": ("length", 1e-9),
           "V": ("voltage", 1.0), "mW": ("power", 1e-3), "W": ("power", 1.0)}
NON_NUMBERS = ("str", "bool")
_SPELLING = re.compile(r"[A-Za-z0-9]+(/[A-Za-z0-9]+)?", re.ASCII)


def dimension(unit: str) -> tuple[str, float]:
    """('energy/size', factor) for 'pJ/bit'; raises KeyError for unknown or misspelt units."""
    if not isinstance(unit, str) or not _SPELLING.fullmatch(unit):
        raise KeyError(unit)
    top, _, bottom = unit.partition("/")
    kind, factor = _SIMPLE[top]
    if not bottom:
        return kind, factor
    below, divisor = _SIMPLE[bottom]
    return f"{kind}/{below}", factor / divisor


def convert(value: float, unit: str, target: str) -> float:
    """`value` in `unit` expressed in `target`; ValueError when the dimensions differ."""
    try:
        source_kind, source_factor = dimension(unit)
    except KeyError:
        raise ValueError(f"unknown unit {str(unit)[:40]!r}") from None
    target_kind, target_factor = dimension(target)
    if source_kind != target_kind:
        raise ValueError(f"unit {unit!r} is not a {target_kind} like {target!r}")
    return value * source_factor / target_factor
