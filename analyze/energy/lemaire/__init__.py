"""The Lemaire analytical energy model (Lemaire et al., ICONIP 2022), in two conventions.

    from spiketrace.analyze import open_trace
    from spiketrace.analyze.energy import energy, recost
    with open_trace("runs/step") as trace:
        report = energy(trace, model="lemaire", preset="lemaire-spikingjelly")   # or "lemaire-qualia"
        report.total_pj, report.breakdown_pj, report.counts, report.to_frame()

* convention "spikingjelly" equals SpikingJelly 2.0.0's estimate_lemaire_energy /
  LemaireEnergyProfiler on the same run: forward calls of Linear/Conv1-3d and IF/LIF modules,
  32-bit words, piecewise-linear pJ/byte by buffer capacity, buffers sized per batch.
* convention "qualia" equals Qualia 2.6.0's EnergyEstimationMetric (the paper authors' code):
  per-inference energies from pooled spike rates, e_ram(n) = 1.09e-5 * n * bits + 13.2 pJ per
  access, the non-binary first layer ("Hybrid") costed once per inference, its bias and
  addressing rules as they are, its residual Add special case (residual.py) and its IF/LIF
  neurons told by what the trace says of them (tests/oracles/ has the golden numbers and how
  to remake them).

The mapper (mapper.py) computes both conventions' activity at once; the preset's
`convention` (costs.py) picks one at costing time (report.py), so presets of either
convention re-cost one activity; sweep.py costs many presets at once. Strictness: by default
modules SpikingJelly's validate_model rejects (Flatten, pooling, BN, PLIF, ...) are listed in
report.warnings, as SpikingJelly does with strict=False; strict=True raises its ValueError
instead.
"""

from __future__ import annotations

from spiketrace.analyze.energy.lemaire.costs import PRESET_UNITS, PRESET_ZERO_ALLOWED, LemaireCosts
from spiketrace.analyze.energy.lemaire.mapper import LemaireActivity, activity, qualia_layer_terms
from spiketrace.analyze.energy.lemaire.report import LemaireReport, cost
from spiketrace.analyze.energy.lemaire.sql import CONVENTIONS, MODEL
from spiketrace.analyze.energy.lemaire.sweep import SWEEPABLE, sweep_totals  # recost's bulk path for sweeps

Costs = LemaireCosts
Activity = LemaireActivity
Report = LemaireReport

__all__ = [
    "CONVENTIONS",
    "MODEL",
    "PRESET_UNITS",
    "PRESET_ZERO_ALLOWED",
    "SWEEPABLE",
    "Activity",
    "Costs",
    "LemaireActivity",
    "LemaireCosts",
    "LemaireReport",
    "Report",
    "activity",
    "cost",
    "qualia_layer_terms",
    "sweep_totals",
]
