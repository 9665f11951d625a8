"""Capture overhead, trace size and write throughput, measured side by side in one run.

    python benchmarks/capture_overhead.py [--rounds 15] [--workloads mlp,vgg,sew] [--tiny-events 1000000]

1. Step time, for the training workloads (benchmarks/workloads.py): plain; under a bare
   pass-through TorchDispatchMode (the floor of any Python dispatch mode); under spiketrace
   capture with full statistics, the same after one untimed recorded step ("steady": what a
   recorder left on pays per step, without a trace's first-step costs), the same with the
   compiled per-op path off ("Python path": capture/native/__init__.py), and with synaptic
   statistics; under SpikingJelly's DispatchCounterMode with its five basic counters; under
   torch.profiler(record_shapes=True) + export_chrome_trace.
   Variants are interleaved with a plain sample next to each (alternating order, rotating
   variant order, warm-up rounds, gc.collect() outside the timed region). Reported: the median
   step time and the median of the paired ratios variant / adjacent plain. A spiketrace sample
   opens a Recorder, records `--steps-per-sample` steps, timed, and closes it; the one-off
   cost of the final flush is reported per event in part 2.
2. Trace size: bytes on disk (all tables, zstd) per event for 20 recorded steps, and events
   per second written end to end.
3. Tiny ops: a loop of `x = x + 1` on 16 elements under one Recorder; events/s per window of
   100k events up to `--tiny-events`, beside a bare pass-through TorchDispatchMode and one
   window with the compiled per-op path off.
4. Steps a schedule does not record: the median paired ratio of the CPU time of a step under a
   Recorder whose schedule leaves it alone (skip_first beyond the run) to a plain step's, for
   a small spiking MLP (small ops: a per-op cost would show) and the workloads.
5. Memory per buffered event, over `--memory-steps` recorded steps with no flush after warm-up
   steps whose rows a flush wrote (so the buffers hold only the measured rows: a buffer that
   grows past its allocation is reallocated whole, and tracemalloc would charge the measured
   events with the warm-up rows it still held): resident memory (RSS) the process gains per
   event (noisy: the allocator reuses freed activations), the Python memory allocated and
   still held per event (tracemalloc: the buffers), and the writer's own estimate (what
   `flush_bytes` is compared with).

Workloads: mlp, vgg, sew (SpikingJelly nets of the performance anchors), resnet18 (spiking
ResNet-18, 32x32), spikformer (a small Spikformer: conv stem, spiking self-attention with
bmm), transformer (a 2-layer nn.TransformerEncoder): benchmarks/workloads.py. spiketrace runs
at both statistics levels (value_statistics="full" and "synaptic").

Targets: full capture <= 1.3x plain on the conv workloads, <= 1.8x on the MLP,
<= 1.5x on resnet18, spikformer and transformer; >= 100k events/s on tiny ops (70% of the
pass-through rate), flat to 1M events; <= 300 B of RSS per buffered event; <= 32 B/event on
disk; unrecorded steps <= 1.10x plain; the writer's estimate within 2x of the RSS it costs.

Run-to-run spread: much of it follows glibc's allocator, whose mmap threshold moves with the
sizes the process freed, so large activations come now from fresh (faulted-in) pages, now
from the heap. Measured on the spiking VGG with MALLOC_MMAP_THRESHOLD_=33554432 and
MALLOC_TRIM_THRESHOLD_=1073741824 in the environment: the plain step 5% faster (112.8 against
118.6 ms) and the capture's parts adding up where by default they did not. The benchmark
keeps the default allocator, which is what a user's job gets.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from contextlib import contextmanager
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.workloads import make, train_step
from spiketrace.capture import Recorder, native, schedule
from spiketrace.capture.session.fast_paths import ENVIRONMENT_VARIABLE


class PassThrough(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def spikingjelly_mode():
    from spikingjelly.activation_based.op_counter import (
        ACCounter,
        DispatchCounterMode,
        FlopCounter,
        MACCounter,
        MemoryAccessCounter,
        SynOpCounter,
    )

    counters = [FlopCounter(), MemoryAccessCounter(), SynOpCounter(), MACCounter(), ACCounter()]
    return DispatchCounterMode(counters, strict=False)


# The compiled per-op path (capture/native/__init__.py), switched off for the "Python path" column.
COMPILED_PATHS = "native_record,native_statistics,native_dispatch"


@contextmanager
def python_path(slow_paths: str):
    """SPIKETRACE_SLOW_PATHS set while a Recorder opens (it reads the switch then)."""
    previous = os.environ.get(ENVIRONMENT_VARIABLE)
    if slow_paths:
        os.environ[ENVIRONMENT_VARIABLE] = slow_paths
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(ENVIRONMENT_VARIABLE, None)
        else:
            os.environ[ENVIRONMENT_VARIABLE] = previous


def recorded_seconds(workload, steps: int, path: Path, untimed_steps: int = 0, slow_paths: str = "",
                     **options) -> float:
    """Seconds of `steps` training steps recorded into `path` (removed after), timed with the
    recorder open: opening a trace and its final flush are paid once per trace (a flush per 200k
    events by default), not per step; the size table reports them. `untimed_steps` recorded
    first leave out what only a trace's first step pays (describing every parameter and buffer,
    first sight of every op and argument structure): the steady state of a recorder left on.
    `slow_paths`: the fast paths off (python_path); `options`: the Recorder's settings."""
    net, x, target, loss_fn, opt = workload
    with python_path(slow_paths), Recorder(path, model=net, optimizer=opt, **options) as recorder:
        for _ in range(untimed_steps):
            train_step(net, x, target, loss_fn, opt, stage=recorder.stage)
            recorder.step()
        start = time.perf_counter()
        for _ in range(steps):
            train_step(net, x, target, loss_fn, opt, stage=recorder.stage)
            recorder.step()
        elapsed = time.perf_counter() - start
    shutil.rmtree(path)
    return elapsed


def make_variants(workload, steps: int, scratch: Path):
    net, x, target, loss_fn, opt = workload

    def plain():
        for _ in range(steps):
            train_step(net, x, target, loss_fn, opt)

    def spiketrace_at(level: str, untimed_steps: int = 0, slow_paths: str = ""):
        def spiketrace():
            return recorded_seconds(workload, steps, scratch / f"capture-{level}", untimed_steps, slow_paths,
                                    value_statistics=level)

        return spiketrace

    def sj_counters():
        with spikingjelly_mode():
            for _ in range(steps):
                train_step(net, x, target, loss_fn, opt)

    def profiler():
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
            for _ in range(steps):
                train_step(net, x, target, loss_fn, opt)
        prof.export_chrome_trace(str(scratch / "profile.json"))

    def pass_through():
        with PassThrough():
            for _ in range(steps):
                train_step(net, x, target, loss_fn, opt)

    return plain, {"pass_through": pass_through, "spiketrace": spiketrace_at("full"),
                   "spiketrace_steady": spiketrace_at("full", untimed_steps=1),
                   "spiketrace_python": spiketrace_at("full", slow_paths=COMPILED_PATHS),
                   "spiketrace_synaptic": spiketrace_at("synaptic"), "sj_5_counters": sj_counters,
                   "torch_profiler": profiler}


def timed(fn, steps: int) -> float:
    """Seconds per step; a variant that times itself returns its own elapsed seconds."""
    gc.collect()
    start = time.perf_counter()
    own = fn()
    return (own if own is not None else time.perf_counter() - start) / steps


def overhead(name: str, rounds: int, warmup: int, steps: int, scratch: Path) -> dict:
    plain, variants = make_variants(make(name), steps, scratch)
    return paired_samples(plain, variants, rounds, warmup, steps)


def paired_samples(plain, variants: dict, rounds: int, warmup: int, steps: int) -> dict:
    """Each variant sampled beside a plain sample (alternating which runs first, rotating the
    variants' order, `warmup` rounds dropped): median ms per step and median paired ratio."""
    times = {"plain": []} | {v: [] for v in variants}
    ratios = {v: [] for v in variants}
    names = list(variants)
    for round_index in range(warmup + rounds):
        order = names[round_index % len(names):] + names[: round_index % len(names)]
        for variant in order:
            if round_index % 2:
                base, value = timed(plain, steps), timed(variants[variant], steps)
            else:
                value, base = timed(variants[variant], steps), timed(plain, steps)
            if round_index >= warmup:
                times["plain"].append(base)
                times[variant].append(value)
                ratios[variant].append(value / base)
    return {
        "median_ms": {v: 1e3 * statistics.median(t) for v, t in times.items()},
        "ratio": {v: statistics.median(r) for v, r in ratios.items()},
    }


def trace_size(name: str, steps: int, scratch: Path) -> tuple[float, float, int]:
    net, x, target, loss_fn, opt = make(name)
    train_step(net, x, target, loss_fn, opt)  # warm up
    path = scratch / f"size-{name}"
    start = time.perf_counter()
    with Recorder(path, model=net, optimizer=opt) as recorder:
        for _ in range(steps):
            train_step(net, x, target, loss_fn, opt, stage=recorder.stage)
            recorder.step()
        closing = time.perf_counter()
    end = time.perf_counter()
    events = recorder.writer.counts["events"]
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    shutil.rmtree(path)
    return size / events, events / (end - start), events, 1e6 * (end - closing) / events


def tiny_ops(total: int, window: int, scratch: Path) -> tuple[list[float], float, float]:
    def loop(n: int) -> float:
        x = torch.zeros(16)
        start = time.perf_counter()
        for _ in range(n):
            x = x + 1
        return time.perf_counter() - start

    plain = loop(window)
    with PassThrough():
        passthrough = window / max(loop(window) - plain, 1e-9)
    rates = []
    with Recorder(scratch / "tiny"):
        for _ in range(total // window):
            elapsed = loop(window)
            rates.append(window / max(elapsed - plain, 1e-9))
    shutil.rmtree(scratch / "tiny")
    with python_path(COMPILED_PATHS), Recorder(scratch / "tiny-python"):
        python_rate = window / max(loop(window) - plain, 1e-9)
    shutil.rmtree(scratch / "tiny-python")
    return rates, passthrough, python_rate


def cpu_timed(fn, steps: int) -> float:
    """CPU seconds of this process per step (less disturbed than wall time on a shared machine)."""
    gc.collect()
    start = time.process_time()
    fn()
    return (time.process_time() - start) / steps


def small():
    """A small spiking MLP (16-32-10, T=4, batch 4): tiny ops, where any per-op cost shows."""
    from spikingjelly.activation_based import functional, layer, neuron

    torch.manual_seed(0)
    net = torch.nn.Sequential(layer.Linear(16, 32), neuron.LIFNode(), layer.Linear(32, 10))
    functional.set_step_mode(net, "m")
    x = (torch.rand(4, 4, 16) < 0.3).float()
    target = torch.randint(0, 10, (4,))
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    return net, x, target, lambda out, y: torch.nn.functional.cross_entropy(out.mean(0), y), opt


def unrecorded_ratio(name: str, rounds: int, steps: int, scratch: Path) -> float:
    """Median paired ratio of CPU time: a step under a Recorder whose schedule does not record
    it / a plain step."""
    net, x, target, loss_fn, opt = small() if name == "small" else make(name)

    def plain():
        for _ in range(steps):
            train_step(net, x, target, loss_fn, opt)

    ratios = []
    with Recorder(scratch / "unrecorded", model=net, optimizer=opt, schedule=schedule(skip_first=10**9)) as recorder:

        def scheduled():
            for _ in range(steps):
                train_step(net, x, target, loss_fn, opt, stage=recorder.stage)
                recorder.step()

        for round_index in range(rounds + 2):
            first, second = (plain, scheduled) if round_index % 2 else (scheduled, plain)
            a, b = cpu_timed(first, steps), cpu_timed(second, steps)
            base, value = (a, b) if first is plain else (b, a)
            if round_index >= 2:
                ratios.append(value / base)
    shutil.rmtree(scratch / "unrecorded")
    return statistics.median(ratios)


def rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def memory_per_event(name: str, steps: int, scratch: Path) -> tuple[float, float, float, int]:
    """(RSS bytes gained per buffered event, Python bytes allocated and kept per buffered event
    (tracemalloc), the writer's estimate per event, events), after warm-up steps."""
    net, x, target, loss_fn, opt = make(name)
    with Recorder(scratch / "memory", model=net, optimizer=opt, flush_events=10**9, flush_bytes=1 << 50) as recorder:
        for step in range(steps + 3):
            train_step(net, x, target, loss_fn, opt, stage=recorder.stage)
            recorder.step()
            if step == 2:  # after warm-up: the first steps' one-off allocations are not per event
                recorder.writer.flush()  # the warm-up rows written: the buffers hold the measured rows only
                gc.collect()
                tracemalloc.start()
                rss, events = rss_bytes(), len(recorder.writer.tables["events"])
                estimate = recorder.writer.buffered_bytes_estimate()
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        gained = len(recorder.writer.tables["events"]) - events
        result = ((rss_bytes() - rss) / gained, kept / gained,
                  (recorder.writer.buffered_bytes_estimate() - estimate) / gained, gained)
    shutil.rmtree(scratch / "memory")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--workloads", default="mlp,vgg,sew,resnet18,spikformer,transformer")
    parser.add_argument("--steps-per-sample", type=int, default=2)
    parser.add_argument("--size-steps", type=int, default=20)
    parser.add_argument("--tiny-events", type=int, default=1_000_000)
    parser.add_argument("--memory-steps", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(2)
    scratch = Path(tempfile.mkdtemp(prefix="spiketrace-bench-"))
    names = [n for n in args.workloads.split(",") if n]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {args.rounds} rounds after {args.warmup} warm-up\n")
    print("## Step time: median ms per training step, and median paired ratio to plain\n")
    print(f"compiled per-op path (capture/native/__init__.py): {'built' if native.AVAILABLE else 'NOT BUILT'}\n")
    print("| workload | plain ms | pass-through mode ms (x) | spiketrace full ms (x) | full, steady ms (x) "
          "| full, Python path ms (x) | spiketrace synaptic ms (x) | SJ 5 counters ms (x) | torch.profiler ms (x) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in names:
        result = overhead(name, args.rounds, args.warmup, args.steps_per_sample, scratch)
        ms, ratio = result["median_ms"], result["ratio"]
        cells = [f"{ms[v]:.1f} ({ratio[v]:.2f}x)" for v in ("pass_through", "spiketrace", "spiketrace_steady",
                                                            "spiketrace_python", "spiketrace_synaptic",
                                                            "sj_5_counters", "torch_profiler")]
        print(f"| {name} | {ms['plain']:.1f} | " + " | ".join(cells) + " |", flush=True)
    print(f"\n## Trace size and write rate ({args.size_steps} recorded steps in one trace)\n")
    print("| workload | events | bytes/event on disk | events/s end to end (compute included) | flush + close µs/event |")
    print("|---|---|---|---|---|")
    for name in names:
        per_event, rate, events, flush = trace_size(name, args.size_steps, scratch)
        print(f"| {name} | {events} | {per_event:.1f} | {rate:,.0f} | {flush:.1f} |", flush=True)
    print("\n## Steps a schedule does not record, and memory per buffered event\n")
    print("| workload | unrecorded step / plain step (median ratio) | RSS B per buffered event "
          "| Python B kept per buffered event | writer estimate B/event | events |")
    print("|---|---|---|---|---|---|")
    small_ratio = unrecorded_ratio("small", 3 * args.rounds, 10, scratch)
    print(f"| small (16-32-10 spiking MLP, batch 4) | {small_ratio:.3f}x | | | | |", flush=True)
    for name in names:
        ratio = unrecorded_ratio(name, args.rounds, args.steps_per_sample, scratch)
        rss, kept, estimate, events = memory_per_event(name, args.memory_steps, scratch)
        print(f"| {name} | {ratio:.3f}x | {rss:,.0f} | {kept:,.0f} | {estimate:,.0f} | {events} |", flush=True)
    print("(RSS moves with the allocator's reuse of freed activations; the Python bytes are what the buffers hold)")
    if args.tiny_events:
        window = min(100_000, args.tiny_events)
        rates, passthrough, python_rate = tiny_ops(args.tiny_events, window, scratch)
        print(f"\n## Tiny ops: capture-only events/s per window of {window:,} (x = x + 1, 16 elements)\n")
        print(f"bare pass-through TorchDispatchMode: {passthrough:,.0f} events/s")
        print("spiketrace, windows in order: " + ", ".join(f"{r / 1e3:,.0f}k" for r in rates))
        print(f"median {statistics.median(rates):,.0f} events/s; last/first window {rates[-1] / rates[0]:.2f}")
        print(f"spiketrace with the compiled path off (one window): {python_rate:,.0f} events/s")
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
