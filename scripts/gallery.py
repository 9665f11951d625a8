"""Make the README's plot gallery from the built-in example: python scripts/gallery.py [OUT_DIR]

Captures the demo's training step (spiketrace.capture.session.example.record_demo), sweeps two compute-model
preset keys with recost, and writes every plot kind of spiketrace.analyze.present.plots as PNG into OUT_DIR
(default docs/gallery/), and the scalars a short Lightning run logged (spiketrace.capture.lightning).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from spiketrace.analyze import open_trace
from spiketrace.analyze.energy import recost
from spiketrace.analyze.energy.comparison import compare
from spiketrace.analyze.present import comparison, logged_scalars, plots
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
            figures["logged_scalars"] = logged_scalars.figure(lightning_scalars(Path(work)))
            for name, figure in figures.items():
                figure.set_dpi(80)
                print(plots.save(figure, out / f"{name}.png"))


def lightning_scalars(work: Path) -> Path:
    """Train a SpikingJelly classifier 3 epochs with Lightning and the callback (every 4th step
    recorded), its scalars in a CSV sink: the README's picture of the logged curves (the model
    and data of notebooks/10_lightning_logged_energy.ipynb)."""
    import lightning as L
    import torch
    from spikingjelly.activation_based import functional, layer, neuron, surrogate

    from spiketrace.capture import schedule
    from spiketrace.capture.lightning import SpiketraceCallback
    from spiketrace.capture.live import CsvSink

    class SpikingClassifier(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(
                layer.Linear(64, 128), neuron.LIFNode(surrogate_function=surrogate.ATan()),
                layer.Linear(128, 10), neuron.LIFNode(surrogate_function=surrogate.ATan()))

        def training_step(self, batch, batch_idx):
            x, y = batch
            rate = sum(self.net(x) for _ in range(4)) / 4
            functional.reset_net(self.net)
            return torch.nn.functional.cross_entropy(rate, y)

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-2)

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.rand(512, 64), torch.randint(0, 10, (512,)))
    callback = SpiketraceCallback(work / "traces", schedule=schedule(wait=3, active=1),
                                  sinks=[CsvSink(work / "scalars.csv")], max_pending=64,  # keep every cycle
                                  energy=[(None, None), ("paper", "paper-fp32-45nm")])
    L.Trainer(max_epochs=3, callbacks=[callback], accelerator="cpu", logger=False, enable_progress_bar=False,
              enable_model_summary=False, enable_checkpointing=False).fit(
        SpikingClassifier(), torch.utils.data.DataLoader(data, batch_size=32))
    return work / "scalars.csv"


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "docs" / "gallery")
