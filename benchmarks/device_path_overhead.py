"""The device path on CPU beside the compiled CPU path, measured side by side in one run.

    python benchmarks/device_path_overhead.py [--rounds 5] [--workloads mlp,spikformer,transformer] [--tiny-events 200000]

A GPU run records through the compiled record with its statistics kept on the device until
flush (capture/tensors/device_statistics.py). With defer_statistics=True a CPU run takes exactly
that code, so its cost on this machine is the device path's host cost; only the kernels torch
launches differ (and on a GPU the statistics' reductions are queued, not run synchronously as
here). For each workload (benchmarks/workloads.py) every variant is sampled beside a plain step
(benchmarks/capture_overhead.py paired_samples: interleaved, medians of paired ratios), at
value_statistics "none" (the record alone) and "full":

    cpu / device        the compiled CPU path / the device path, ratio to plain
    device/cpu          their quotient: the device path's extra cost
    torch               the device path with a CPU tensor counted by the torch kernels and
                        batches a CUDA tensor takes (fast path native_statistics off), not by
                        the CPU's compiled scan: on CPU those kernels run synchronously (and 50x
                        slower than the scan on mixed values), so this is an upper bound of the
                        host cost a GPU pays, whose kernels are only queued

Then tiny ops (`x = x + 1` on 16 elements) in events/s on each path, and the most memory the
pending statistics held (slot buffers and batch copies, torch kernels) during two recorded steps.

Targets: at "none" device/cpu <= 1.15 (one record path); at "full" <= 2.0 on every workload;
tiny ops on the device path >= 70k events/s.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.capture_overhead import paired_samples, python_path, recorded_seconds
from benchmarks.workloads import make, train_step
from spiketrace.capture import Recorder

LEVELS = ("none", "full")
# path -> (defer_statistics, fast paths off)
PATHS = {"cpu": (False, ""), "device": (True, ""), "torch": (True, "native_statistics")}


@contextmanager
def opened(path, slow: str, **options):
    """A Recorder with the fast paths `slow` off (capture_overhead.python_path: read as it opens)."""
    with python_path(slow), Recorder(path, **options) as recorder:
        yield recorder


def recorded_steps(workload, steps: int, scratch: Path, level: str, defer: bool, slow: str):
    return lambda: recorded_seconds(workload, steps, scratch / f"capture-{level}-{defer}-{slow}", slow_paths=slow,
                                    value_statistics=level, defer_statistics=defer)


def workload_ratios(name: str, rounds: int, warmup: int, steps: int, scratch: Path) -> dict:
    workload = make(name)
    net, x, target, loss_fn, opt = workload

    def plain():
        for _ in range(steps):
            train_step(net, x, target, loss_fn, opt)

    variants = {f"{path}-{level}": recorded_steps(workload, steps, scratch, level, *options)
                for level in LEVELS for path, options in PATHS.items()}
    return paired_samples(plain, variants, rounds, warmup, steps)


def pending_peak_bytes(name: str, scratch: Path) -> int:
    """The pending statistics' peak over two recorded steps on the device path with the torch
    kernels, flushed as by default."""
    net, x, target, loss_fn, opt = make(name)
    with opened(scratch / "peak", "native_statistics", model=net, optimizer=opt, defer_statistics=True) as recorder:
        for _ in range(2):
            train_step(net, x, target, loss_fn, opt, stage=recorder.stage)
            recorder.step()
        peak = recorder.registry.slots.peak_bytes
    shutil.rmtree(scratch / "peak")
    return peak


def tiny_rates(total: int, scratch: Path) -> dict[str, float]:
    def loop(n: int) -> float:
        x = torch.zeros(16)
        start = time.perf_counter()
        for _ in range(n):
            x = x + 1
        return time.perf_counter() - start

    rates = {path: [] for path in PATHS}
    for _ in range(3):
        for path, (defer, slow) in PATHS.items():
            plain = loop(total)
            with opened(scratch / f"tiny-{path}", slow, defer_statistics=defer):
                elapsed = loop(total)
            shutil.rmtree(scratch / f"tiny-{path}")
            rates[path].append(total / max(elapsed - plain, 1e-9))
    return {path: statistics.median(r) for path, r in rates.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--steps-per-sample", type=int, default=2)
    parser.add_argument("--workloads", default="mlp,vgg,sew,resnet18,spikformer,transformer")
    parser.add_argument("--tiny-events", type=int, default=200_000)
    args = parser.parse_args()
    torch.manual_seed(0)
    scratch = Path(tempfile.mkdtemp(prefix="spiketrace-device-path-"))
    print(f"device path (defer_statistics=True) beside the compiled CPU path; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; medians of {args.rounds} paired samples of "
          f"{args.steps_per_sample} recorded steps\n")
    header = f"{'workload':<12} {'plain ms':>9}" + "".join(
        f" {'cpu ' + level:>9} {'device ' + level:>12} {'dev/cpu':>8} {'torch/cpu':>9}" for level in LEVELS) + \
        f" {'pending peak':>13}"
    print(header)
    for name in args.workloads.split(","):
        result = workload_ratios(name, args.rounds, args.warmup, args.steps_per_sample, scratch)
        ratio = result["ratio"]
        cells = "".join(f" {ratio[f'cpu-{level}']:>8.2f}x {ratio[f'device-{level}']:>11.2f}x "
                        f"{ratio[f'device-{level}'] / ratio[f'cpu-{level}']:>7.2f}x "
                        f"{ratio[f'torch-{level}'] / ratio[f'cpu-{level}']:>8.2f}x" for level in LEVELS)
        peak = pending_peak_bytes(name, scratch)
        print(f"{name:<12} {result['median_ms']['plain']:>9.1f}{cells} {peak / 1024:>10.0f} KiB", flush=True)
    rates = tiny_rates(args.tiny_events, scratch)
    print(f"\ntiny ops (16-element add, {args.tiny_events} events, median of 3): "
          f"cpu path {rates['cpu'] / 1e3:.1f}k events/s, device path {rates['device'] / 1e3:.1f}k events/s, "
          f"torch kernels {rates['torch'] / 1e3:.1f}k events/s")
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
