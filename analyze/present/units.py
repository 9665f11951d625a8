"""How an energy is shown: the one formatter every table, plot and page uses.

Energies are computed in pJ; shown in the largest unit of pJ, nJ, µJ, mJ, J that keeps the
value at least 1, so a CLI table, the report and a plot's axis print the same thing.
"""

from __future__ import annotations

import functools
import math

ENERGY_UNITS = (("J", 1e12), ("mJ", 1e9), ("µJ", 1e6), ("nJ", 1e3), ("pJ", 1.0))


def energy_scale(values) -> tuple[float, str]:
    """(pJ per unit, unit) for showing `values` (pJ) together: chosen by the largest magnitude."""
    finite = [abs(float(v)) for v in values if v is not None and math.isfinite(float(v))]
    top = max(finite, default=0.0)
    for unit, scale in ENERGY_UNITS:
        if top >= scale:
            return scale, unit
    return 1.0, "pJ"


UNIT_CHOICES = ("auto", "pJ", "nJ", "uJ", "mJ", "J")  # --units; uJ is typed for µJ


def format_energy(pj: float, digits: int = 3, unit: str | None = None) -> str:
    """`pj` picojoules as text: 1234567.0 -> '1.235 µJ'; `unit` fixes the unit (one of
    UNIT_CHOICES; 'auto' or None picks it from the value)."""
    if unit in (None, "auto"):
        scale, unit = energy_scale([pj])
    else:
        unit = "µJ" if unit == "uJ" else unit
        scale = dict(ENERGY_UNITS)[unit]
    return f"{pj / scale:,.{digits}f} {unit}"


COUNT_UNITS = ((10**12, "T"), (10**9, "G"), (10**6, "M"), (10**3, "K"))


def human(n: float) -> str:
    """`n` in K/M/G/T (powers of 1000), three significant decimals: 1234 -> "1.23K"."""
    n = int(n)
    sign, size = ("-" if n < 0 else ""), abs(n)
    for index, (scale, unit) in enumerate(COUNT_UNITS):
        if size >= scale:
            text = f"{size / scale:.2f}"
            if float(text) >= 1000 and index > 0:  # 999_999 rounds to "1.00M", not "1000.00K"
                bigger, bigger_unit = COUNT_UNITS[index - 1]
                text, unit = f"{size / bigger:.2f}", bigger_unit
            return f"{sign}{text}{unit}"
    return f"{sign}{size}"


def human_bytes(n: float) -> str:
    """Bytes in decimal units: 964 -> "964B", 94_080 -> "94.08KB"."""
    return f"{human(n)}B"



# metric (as `diff` names it) -> the unit its values are in; None: a plain number
METRIC_UNITS = {"energy": "pJ", "counts.memory_access": "byte"}


def metric_unit(metric: str) -> str | None:
    return next((unit for prefix, unit in METRIC_UNITS.items() if metric == prefix or metric.startswith(prefix + ".")),
                None)


def format_metric(metric: str, value: float) -> str:
    """A compared number with its unit: energies in pJ..J, bytes in B..GB, counts in K/M/G."""
    unit = metric_unit(metric)
    if unit == "pJ":
        return format_energy(value)
    if unit == "byte":
        return human_bytes(value)
    if metric.startswith("spike_rate"):
        return f"{value:.4f}"
    return human(value)


@functools.cache
def _registry():
    import pint  # only when a unit is written: building its registry takes most of a second

    registry: pint.UnitRegistry[float] = pint.UnitRegistry()
    registry.define("KB = kilobyte")  # what people write for 1000 bytes (pint knows kB)
    return registry


def quantity_in(number: float, unit_text: str, unit: str | None, where: str) -> float:
    """`number unit_text` (e.g. 5, 'uJ') in `unit` (e.g. 'pJ'); ValueError naming `where` when
    the units do not match, or when the metric has no unit."""
    if unit is None:
        raise ValueError(f"{where}: this metric is a plain number; drop the unit {unit_text!r}")
    try:
        return float(_registry().Quantity(number, unit_text).to(unit).magnitude)
    except Exception as problem:  # noqa: BLE001 - pint's errors are several types; one line for the user
        raise ValueError(f"{where}: cannot read {number:g} {unit_text} as {unit} ({problem})") from None
