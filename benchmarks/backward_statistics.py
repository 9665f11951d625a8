"""What taking conv_spike_taps of convolution_backward (schema 1.5) costs a recorded step,
measured side by side in one run.

    python benchmarks/backward_statistics.py [--workloads vgg,resnet18] [--pairs 15]

Paired recorded training steps of the same workload (benchmarks/workloads.py), each in its own
Recorder after one untimed recorded step: with the statistic as shipped, and with
convolution_backward taken out of the op-statistics table (the 1.4 behaviour). Pairs alternate
their order against drift; reported: the median paired ratio (with / without) and its range.
Target: <= 1.05 (the statistic is one spike-tap count per spiking conv's backward, the work the
forward conv's statistic already does once).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
import warnings

from benchmarks.workloads import make, train_step
from spiketrace.capture import Recorder
from spiketrace.capture.ops import dispatch, scalar_rows
from spiketrace.schemas import statistics as statistic_tables

OP = "aten.convolution_backward.default"
SHIPPED = statistic_tables.OP_STATISTICS[OP]
# every module that bound the table at import time
TABLES = (statistic_tables.OP_STATISTICS, dispatch.OP_STATISTICS, scalar_rows.OP_STATISTICS)


def _take_backward_statistic(on: bool) -> None:
    for table in TABLES:
        if on:
            table[OP] = SHIPPED
        else:
            table.pop(OP, None)


def recorded_step_seconds(name: str, with_statistic: bool) -> float:
    _take_backward_statistic(with_statistic)
    net, x, target, loss_fn, opt = make(name)
    folder = tempfile.mkdtemp()
    try:
        with Recorder(f"{folder}/trace", model=net, optimizer=opt) as recorder:
            train_step(net, x, target, loss_fn, opt, stage=recorder.stage)  # untimed: first-step costs
            recorder.step()
            start = time.perf_counter()
            train_step(net, x, target, loss_fn, opt, stage=recorder.stage)
            return time.perf_counter() - start
    finally:
        _take_backward_statistic(True)
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="vgg,resnet18")
    parser.add_argument("--pairs", type=int, default=15)
    options = parser.parse_args()
    warnings.simplefilter("ignore")
    print(f"{options.pairs} pairs of recorded steps per workload; median paired ratio with / without "
          "convolution_backward's conv_spike_taps")
    print(f"{'workload':<10} {'median':>7} {'range':>13}  target")
    for name in options.workloads.split(","):
        ratios = []
        for pair in range(options.pairs):
            order = (True, False) if pair % 2 else (False, True)
            seconds = {on: recorded_step_seconds(name, on) for on in order}
            ratios.append(seconds[True] / seconds[False])
        median = statistics.median(ratios)
        print(f"{name:<10} {median:7.3f} {min(ratios):6.3f}-{max(ratios):6.3f}  {'ok' if median <= 1.05 else 'over'} (<= 1.05)")


if __name__ == "__main__":
    main()
