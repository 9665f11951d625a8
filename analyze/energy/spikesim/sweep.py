"""SpikeSim totals under many presets at once.

Every SpikeSim energy is linear in its pJ parameters: per call (or, under compat, per
stage) counts at the preset's crossbar size times sums of those parameters, no product of
two of them (formulas.py). So with the crossbar size, device and mode of the base fixed, a
sweep of pJ parameters is one costing per swept parameter, with that parameter at 1 pJ and
every other pJ parameter at 0 (its coefficient), plus one with the swept parameters at 0
(what the others contribute); each preset is then a dot product. Nothing is subtracted, so
no precision is lost to cancellation. Sweeps of the crossbar size, device or mode change
the counts themselves: recost costs those preset by preset.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np
import pandas as pd

from spiketrace.analyze.energy.spikesim.costs import PJ_FIELDS, Costs
from spiketrace.analyze.energy.spikesim.mapper import Activity
from spiketrace.analyze.energy.spikesim.report import cost

SWEEPABLE = PJ_FIELDS


def sweep_totals(activity: Activity, base: Costs, values: Mapping[str, np.ndarray], *, compat=None) -> pd.DataFrame:
    """recost's bulk path: energy_total_pj of each preset of a sweep of pJ parameters."""
    return linear_totals(activity, base, values, compat=compat)[["energy_total_pj"]]


def linear_totals(activity: Activity, base: Costs, values: Mapping[str, np.ndarray], *, compat=None) -> pd.DataFrame:
    """energy_total_pj and the energy components (pe_cycle_pj, or patch_control_pj, xbar_pj
    and neuron_pj) for each index of `values` (pJ keys -> equal-length arrays), every other
    parameter from `base`."""
    unknown = sorted(set(values) - set(PJ_FIELDS))
    if unknown:
        raise ValueError(f"cannot sweep {unknown[0]!r} in bulk (the pJ keys: {', '.join(PJ_FIELDS)})")
    n = len(next(iter(values.values()))) if values else 1

    def breakdown(costs) -> dict[str, float]:
        report = cost(activity, costs, compat=compat)
        return {"energy_total_pj": report.energy_total_pj, **report.breakdown_pj}

    # (mypy checks a **dict against every field's type; these keys are the pJ fields, all floats)
    rest = breakdown(dataclasses.replace(base, **{key: 0.0 for key in values}))  # type: ignore[arg-type]
    unit = {key: breakdown(dataclasses.replace(base, **{f: float(f == key) for f in PJ_FIELDS}))  # type: ignore[arg-type]
            for key in values}
    totals = {name: np.full(n, value, dtype=float) for name, value in rest.items()}
    for key, column in values.items():
        column = np.asarray(column, dtype=float)
        for name in totals:
            totals[name] = totals[name] + column * unit[key].get(name, 0.0)
    return pd.DataFrame(totals)
