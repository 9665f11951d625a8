"""Make the README's plot gallery from the built-in example: python scripts/gallery.py [OUT_DIR]

Captures the demo's training step (spiketrace.capture.session.example.record_demo), sweeps two compute-model
preset keys with recost, and writes every plot kind of spiketrace.analyze.present.plots as PNG into OUT_DIR
(default docs/gallery/).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from spiketrace.analyze import open_trace
from spiketrace.analyze.energy import recost
from spiketrace.analyze.energy.comparison import compare
from spiketrace.analyze.present import comparison, plots
from spiketrace.capture.session.example import record_demo


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        with open_trace(record_demo(Path(work) / "demo")) as trace:
            sweep = recost(trace, "compute", sweep={"e_mac_pj": [0.2, 1.0, 2.3, 4.6],
                                                     "e_memory_pj_per_byte": [0.5, 5.0, 24.96]})
            figures = {
                "energy_by_layer": plots.energy_by_layer(trace),
                "stage_breakdown": plots.stage_breakdown(trace),
                "spike_rate_heatmap": plots.spike_rate_heatmap(trace),
                "roofline": plots.roofline(trace, peak_flops=1e12, bandwidth=2e11),
                "sweep_curves": plots.sweep_curves(sweep, "e_mac_pj"),
                "sweep_heatmap": plots.sweep_heatmap(sweep, "e_mac_pj", "e_memory_pj_per_byte"),
                "compare": plots.compare(trace, trace, labels=("run A", "run B")),
                # the demo's input is [T=4, B=8, ...]: 8 samples (NeuroBench's batch-first rule would take T)
                "chips_and_paper": comparison.figure(compare(trace, samples=8, stage="forward")),
            }
            for name, figure in figures.items():
                figure.set_dpi(80)
                print(plots.save(figure, out / f"{name}.png"))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "docs" / "gallery")
