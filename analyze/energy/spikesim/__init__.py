"""SpikeSim energy, SpikingJelly 2.0.0's estimate_spikesim_energy, plus SpikeSim's area and latency.

    from spiketrace.analyze.energy import energy
    report = energy(trace, "spikesim", "spikesim-rram-64")                      # dense mode
    report = energy(trace, "spikesim", "spikesim-sram-64", overrides=["activity_mode=event", "xbar_size=128"])
    report.energy_total_pj, report.energy_by_stage, report.area_mm2, report.latency_ms

SpikeSim (Moitra et al., TCAD 2023; github.com/Intelligent-Computing-Lab-Yale/SpikeSim at
c2627bc) maps each Conv2d layer onto crossbars of xbar_size rows. SpikingJelly's port costs
the Conv2d forward inference calls: dense mode from shapes alone (equal to SpikeSim's own
code), event mode from where the input spikes fall (SpikingJelly-defined). A SpikeSim
"stage" is a Conv2d layer, named by its scope, as in SpikingJelly's report; the trace stage
to analyse is the `stage=` argument.

Event mode needs the conv inputs' spike maps: record with Recorder(..., keep_binary_inputs=True).
The mapper is mapper.py; the preset is costs.py, the costing report.py (with the formulas of
formulas.py), and sweep.py costs a sweep of pJ parameters at once.

Beyond SpikingJelly:
* strict=False (the default; SpikingJelly's is True) costs the supported layers and lists the
  rest in `unsupported` with their volumes; strict=True refuses where SpikingJelly refuses.
* `area_mm2` and `latency_ms`: SpikeSim's compute_area and latency_gen over the costed layers
  (its VGG9 / CIFAR-10, T=5, 64x64 RRAM configuration gives 8.43 mm2 and 62.8 ms, as
  tests/test_spikesim_differential.py checks).
* Linear layers (SpikeSim does not model them) are warned about and listed.
* A stage called with inconsistent shapes costs each call with its own geometry
  (compat="spikingjelly": the first call's, as SpikingJelly does).
* An eval-mode forward recorded with grad enabled is costed as inference, with a warning
  (compat="spikingjelly" and strict=True refuse it, as SpikingJelly's counter does).
"""

from __future__ import annotations

from spiketrace.analyze.energy.spikesim.costs import PRESET_UNITS, AreaCosts, Costs, LatencyCosts
from spiketrace.analyze.energy.spikesim.mapper import MODEL, Activity, activity
from spiketrace.analyze.energy.spikesim.report import Report, cost
from spiketrace.analyze.energy.spikesim.sweep import SWEEPABLE, sweep_totals  # recost's bulk path for sweeps

__all__ = ["MODEL", "PRESET_UNITS", "SWEEPABLE", "Activity", "AreaCosts", "Costs", "LatencyCosts", "Report",
           "activity", "cost", "sweep_totals"]
