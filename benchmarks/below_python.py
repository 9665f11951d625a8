"""Could capture leave the Python dispatch mode? What a capture below Python would see and cost.

    python benchmarks/below_python.py [--rounds 9] [--workloads spikformer,transformer]

The floor of any Python TorchDispatchMode (a bare pass-through mode: 1.36-1.40x a plain step on
the Spikformer and the 2-layer TransformerEncoder here) is above what the capture overhead target allows the
whole capture on them (1.5x) once a record per op is paid. The one mechanism torch offers
below Python for every op is the RecordFunction observer torch.profiler is built on. This
benchmark compiles one (benchmarks/cpp/record_function_observer.cpp, with
torch.utils.cpp_extension: it needs a C++ compiler and torch's headers, ~30 s the first time)
that keeps what spiketrace's record keeps per op, names and tensor layouts (no values, no
module hooks), and measures, on the same training step:

1. The op stream: aten ops per step under a counting TorchDispatchMode against the observer's
   (which looks into a library's own ops, such as SpikingJelly's sj_lif::forward, as a mode
   sees their aten ops), and the ops counted differently. They differ where the run itself
   does: while a dispatch mode is on, torch's autograd accumulates gradients out of place
   (isTensorSubclassLike holds under a mode), so a step without one runs add_ where the mode
   saw add (160 of them a Spikformer step). SpikingJelly's numbers are taken under its own
   dispatch mode, and ours must equal them: only a mode sees the run they count.
2. The cost: the median paired ratio to the adjacent plain step of a bare pass-through mode
   and of the observer, sampled as benchmarks/capture_overhead.py samples (paired_samples).
   The observer is no cheaper: torch boxes the inputs and outputs of every dispatcher call
   for it, the calls inside kernels included, before it can pass over them.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import sys
import tempfile
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.capture_overhead import PassThrough, paired_samples
from benchmarks.workloads import make, train_step

OBSERVER_SOURCE = Path(__file__).resolve().parent / "cpp" / "record_function_observer.cpp"


class OpCounter(TorchDispatchMode):
    """Calls per op name (namespace::name, overload dropped: the observer sees no overload)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls[func.name().split(".")[0]] += 1
        return func(*args, **(kwargs or {}))


def build_observer(build_directory: Path):
    from torch.utils.cpp_extension import load

    return load("spiketrace_record_function_observer", [str(OBSERVER_SOURCE)], extra_cflags=["-O2"],
                build_directory=str(build_directory))


def op_streams(observer, workload) -> tuple[collections.Counter, collections.Counter]:
    net, x, target, loss_fn, opt = workload
    with OpCounter() as mode:
        train_step(net, x, target, loss_fn, opt)
    observer.start()
    try:
        train_step(net, x, target, loss_fn, opt)
    finally:
        observed = collections.Counter(observer.stop())
    return mode.calls, observed


def paired_ratios(observer, workload, rounds: int, steps: int) -> dict[str, float]:
    net, x, target, loss_fn, opt = workload

    def steps_of(wrap):
        def run():
            with wrap():
                for _ in range(steps):
                    train_step(net, x, target, loss_fn, opt)
        return run

    class Observed:
        def __enter__(self):
            observer.start()

        def __exit__(self, *exc):
            observer.stop()

    variants = {"pass-through mode": steps_of(PassThrough), "RecordFunction observer": steps_of(Observed)}
    return paired_samples(steps_of(contextlib.nullcontext), variants, rounds, 1, steps)["ratio"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps-per-sample", type=int, default=2)
    parser.add_argument("--workloads", default="spikformer,transformer")
    args = parser.parse_args()
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory(prefix="spiketrace-observer-") as build:
        try:
            observer = build_observer(Path(build))
        except Exception as exc:  # noqa: BLE001 - no compiler or headers: nothing to measure
            sys.exit(f"below_python.py: the observer did not build ({type(exc).__name__}: {exc})")
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {args.rounds} rounds of "
              f"{args.steps_per_sample} steps\n")
        print("| workload | ops/step, dispatch mode | ops/step, observer | ops counted differently (mode, observer) "
              "| pass-through mode (x plain) | observer (x plain) |")
        print("|---|---|---|---|---|---|")
        for name in args.workloads.split(","):
            workload = make(name)
            for _ in range(2):
                train_step(*workload)
            mode_calls, observed_calls = op_streams(observer, workload)
            differing = sorted((op for op in mode_calls.keys() | observed_calls.keys()
                                if mode_calls[op] != observed_calls[op]),
                               key=lambda op: -abs(mode_calls[op] - observed_calls[op]))
            shown = ", ".join(f"{op} ({mode_calls[op]}, {observed_calls[op]})" for op in differing[:6])
            ratio = paired_ratios(observer, workload, args.rounds, args.steps_per_sample)
            print(f"| {name} | {sum(mode_calls.values())} | {sum(observed_calls.values())} | {shown} | "
                  f"{ratio['pass-through mode']:.2f}x | {ratio['RecordFunction observer']:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
