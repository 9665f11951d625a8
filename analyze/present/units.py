"""How an energy is shown: the one formatter every table, plot and page uses.

Energies are computed in pJ; shown in the largest unit of pJ, nJ, µJ, mJ, J that keeps the
value at least 1, so a CLI table, the report and a plot's axis print the same thing.
"""

from __future__ import annotations

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


def format_energy(pj: float, digits: int = 3) -> str:
    """`pj` picojoules as text: 1234567.0 -> '1.235 µJ'."""
    scale, unit = energy_scale([pj])
    return f"{pj / scale:,.{digits}f} {unit}"
