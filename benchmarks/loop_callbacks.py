"""What the Lightning callback costs a training run, measured side by side in one run.

    python benchmarks/loop_callbacks.py [--steps 60] [--pairs 5]

Two questions, each answered by paired runs (A then B, `--pairs` times, medians):

1. A step the schedule does not record: Lightning fits of the same model and data, without
   the callback and with it (logging on, a schedule that records 3 steps of the fit). The
   per-step time of the steps that are not recorded (each step timed from on_train_batch_start
   to on_train_batch_end by a timing callback both fits carry), median per fit; target ratio
   <= 1.02.
2. A recorded step: what recording adds to a run per recorded step (the run's time over its
   plain twin's, so the flush and the analysis are counted wherever they land), with the
   callback (logging on: the live analysis runs in its worker process) and with a bare
   Recorder in a hand-written loop of the same work; target: the callback adds no more than
   the bare Recorder (ratio <= 1). The callback runs twice, logging and not (log=False), which
   tells the recording's cost from the live analysis's.

Runs alternate their order from pair to pair, against drift.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import lightning as L
import torch

from spiketrace.capture import Recorder
from spiketrace.capture.lightning import SpiketraceCallback
from spiketrace.capture.session.example import SpikingMLP, example_batch

RECORDED = (10, 60, 110)


# A step of some 10-20 ms on 2 cores, as a small real SNN's (the live analysis of a cycle, in its
# worker process, then overlaps some tens of steps, as it would a real run's).
WIDTH, HIDDEN, BATCH, TIME_STEPS = 256, 512, 64, 8


class Module(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = SpikingMLP(n_in=WIDTH, n_hidden=HIDDEN)

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.net.sn1.reset()
        self.net.sn2.reset()
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class StepTimes(L.Callback):
    def __init__(self) -> None:
        self.times: list[float] = []
        self._start = 0.0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.times.append(time.perf_counter() - self._start)


def batches(steps: int):
    """[T, B, ...] batches as the example model takes them; the loader yields each as is."""
    data = [example_batch(steps=TIME_STEPS, batch=BATCH, n_in=WIDTH, seed=i) for i in range(steps)]
    return torch.utils.data.DataLoader(data, batch_size=None, shuffle=False)


def lightning_fit(steps: int, callback: SpiketraceCallback | None) -> list[float]:
    torch.manual_seed(0)
    timer = StepTimes()
    trainer = L.Trainer(max_steps=steps, callbacks=[timer, *([callback] if callback else [])], accelerator="cpu",
                        logger=False, enable_progress_bar=False, enable_model_summary=False,
                        enable_checkpointing=False)
    trainer.fit(Module(), batches(steps))
    return timer.times


def hand_loop(steps: int, root: Path | None) -> list[float]:
    """The same step by hand: with a bare Recorder recording RECORDED into `root`, or plain (None)."""
    torch.manual_seed(0)
    module = Module()
    optimizer = module.configure_optimizers()
    times = []
    recorder = Recorder(root, model=module, optimizer=optimizer, schedule=lambda step: step in RECORDED) \
        if root is not None else None
    stage = recorder.stage if recorder is not None else (lambda name: contextlib.nullcontext())
    with recorder or contextlib.nullcontext():
        for batch in batches(steps):
            start = time.perf_counter()
            with stage("forward"):
                loss = module.training_step(batch, 0)
            with stage("backward"):
                loss.backward()
            with stage("optimizer"):
                optimizer.step()
            optimizer.zero_grad()
            if recorder is not None:
                recorder.step()
            times.append(time.perf_counter() - start)
    return times


def unrecorded_median(times: list[float]) -> float:
    """The median step the schedule leaves alone, the first (one-off costs) and the one after
    each recorded step (which ends the recorded cycle: Recorder.step() flushes it) left out."""
    return statistics.median(t for i, t in enumerate(times)
                             if i > 0 and i not in RECORDED and i - 1 not in RECORDED)


def added_per_recorded_step(recorded: list[float], plain: list[float]) -> float:
    """What recording added to the run, per recorded step: the whole run's time over the plain
    twin's, so a flush or an analysis landing on a later step is counted too."""
    return (sum(recorded[1:]) - sum(plain[1:])) / len(RECORDED)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=160)
    parser.add_argument("--pairs", type=int, default=5)
    options = parser.parse_args()
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    unrecorded, added, unrecorded_unlogged, added_unlogged = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(options.pairs):
            def with_callback(pair=pair, log=True):
                return lightning_fit(options.steps, SpiketraceCallback(Path(tmp) / f"cb{pair}{log}", log=log,
                                                                       schedule=lambda step: step in RECORDED))
            runs = {"plain": lambda: lightning_fit(options.steps, None), "callback": with_callback,
                    "unlogged": lambda: with_callback(log=False),
                    "hand": lambda: hand_loop(options.steps, None),
                    "bare": lambda pair=pair: hand_loop(options.steps, Path(tmp) / f"bare{pair}")}
            order = list(runs) if pair % 2 == 0 else list(reversed(runs))  # alternate, against drift
            times = {name: runs[name]() for name in order}
            bare = added_per_recorded_step(times["bare"], times["hand"])
            for name, values in (("callback", unrecorded), ("unlogged", unrecorded_unlogged)):
                values.append(unrecorded_median(times[name]) / unrecorded_median(times["plain"]))
            for name, values in (("callback", added), ("unlogged", added_unlogged)):
                values.append(added_per_recorded_step(times[name], times["plain"]) / bare)
            print(f"pair {pair}: unrecorded step: plain {unrecorded_median(times['plain']) * 1e3:.3f} ms, "
                  f"with the callback {unrecorded_median(times['callback']) * 1e3:.3f} ms (not logging "
                  f"{unrecorded_median(times['unlogged']) * 1e3:.3f} ms); added per recorded step: callback "
                  f"{added_per_recorded_step(times['callback'], times['plain']) * 1e3:.1f} ms (not logging "
                  f"{added_per_recorded_step(times['unlogged'], times['plain']) * 1e3:.1f} ms), bare Recorder "
                  f"{bare * 1e3:.1f} ms")
    print(f"\n{options.pairs} pairs of runs, {options.steps} steps each, steps {list(RECORDED)} recorded; medians")
    print(f"{'measure':64} {'median':>8} {'range':>13}  target")
    rows = [("unrecorded step with the callback / plain Lightning step", unrecorded, 1.02),
            ("  the same, the callback not logging (log=False)", unrecorded_unlogged, 1.02),
            ("time recording adds per recorded step: callback / bare Recorder", added, 1.0),
            ("  the same, the callback not logging (log=False)", added_unlogged, 1.0)]
    for name, values, target in rows:
        median = statistics.median(values)
        verdict = "ok" if median <= target else "over"
        print(f"{name:64} {median:8.3f} {min(values):6.3f}-{max(values):6.3f}  {verdict} (<= {target})")


if __name__ == "__main__":
    main()
