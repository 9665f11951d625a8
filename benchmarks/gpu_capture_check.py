"""GPU check of capture: what a recorded step costs on the GPU, that no op waits on the device,
and that the GPU trace counts what the same step captured on CPU counts.

    python benchmarks/gpu_capture_check.py                 # on a CUDA machine; 2-4 minutes
    python benchmarks/gpu_capture_check.py --device cpu    # the same script on CPU (a dry run
                                                           # of its checks, on the device path)

On a machine without CUDA (and no --device cpu) it says so and exits 0. Otherwise, for each of
the six workloads (benchmarks/workloads.py):

1. Step times: a plain step and a recorded step (Recorder open, full statistics, its second
   step timed inside it), interleaved, the device synchronised around the timed step only:
   medians of --rounds, and the median of the paired ratios. Goals: <= 1.5x on the conv nets (vgg, sew, resnet18), <= 2x
   on the others; printed as measured, not failed.
2. No sync: one more recorded step under torch.cuda.set_sync_debug_mode("error"), which raises
   on any synchronising call, with a flush threshold no step reaches: the step runs through and
   the manifest's `degraded` list stays empty (a sync inside the capture would be caught there).
3. The trace validates, every statistic was filled in at close, and its counters equal those of
   the same step (same weights, same batch) captured on CPU: per counter and op, exact for the
   shape-only counters (flop, mac, memory_access), to 1% for the value-dependent ones (ac,
   synop: a spike at the threshold may flip between backends); ops that differ by backend
   (cudnn_batch_norm against native_batch_norm, fused attention kernels, ...) are compared as
   their twins' sums (BACKEND_TWINS) and listed by name, each side's ops the other lacks too.

Prints PASS/FAIL per check and a table of step times; exits 1 if a check failed.
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.capture_overhead import paired_samples
from benchmarks.workloads import make, train_step
from spiketrace.capture import Recorder

WORKLOADS = ("mlp", "vgg", "sew", "resnet18", "spikformer", "transformer")
CONV_NETS = ("vgg", "sew", "resnet18")
EXACT_COUNTERS = ("flop", "mac", "memory_access")
VALUE_COUNTERS = ("ac", "synop")
# An op of one backend -> the name its twin has on the other (the same work, another kernel).
BACKEND_TWINS = {
    "aten.cudnn_batch_norm.default": "aten.native_batch_norm.default",
    "aten.cudnn_batch_norm_backward.default": "aten.native_batch_norm_backward.default",
    "aten._scaled_dot_product_efficient_attention.default": "aten._scaled_dot_product_flash_attention_for_cpu.default",
    "aten._scaled_dot_product_flash_attention.default": "aten._scaled_dot_product_flash_attention_for_cpu.default",
    "aten._scaled_dot_product_cudnn_attention.default": "aten._scaled_dot_product_flash_attention_for_cpu.default",
    "aten._scaled_dot_product_efficient_attention_backward.default":
        "aten._scaled_dot_product_flash_attention_for_cpu_backward.default",
    "aten._scaled_dot_product_flash_attention_backward.default":
        "aten._scaled_dot_product_flash_attention_for_cpu_backward.default",
    "aten._scaled_dot_product_cudnn_attention_backward.default":
        "aten._scaled_dot_product_flash_attention_for_cpu_backward.default",
}
FAILED: list[str] = []


def check(name: str, ok: bool, detail: str = "") -> None:
    print(f"{'PASS' if ok else 'FAIL'}  {name}" + (f": {detail}" if detail else ""), flush=True)
    if not ok:
        FAILED.append(name)


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def on(device: str, workload, state=None):
    """The workload on `device`, its weights `state` where given (the other side's)."""
    net, x, target, loss_fn, opt = workload
    if state is not None:
        net.load_state_dict(state)
    net.to(device)
    opt = type(opt)(net.parameters(), **{k: v for k, v in opt.defaults.items() if k in ("lr", "momentum")})
    return net, x.to(device), target.to(device), loss_fn, opt


def step_times(work, device: str, rounds: int, root: Path, defer: bool) -> tuple[float, float, float]:
    """Median ms of a plain step and of a recorded one and the median of their paired ratios
    (benchmarks/capture_overhead.py paired_samples: interleaved, gc outside the timed part)."""
    def plain():
        synchronize(device)
        start = time.perf_counter()
        train_step(*work)
        synchronize(device)
        return time.perf_counter() - start

    def recorded():
        with Recorder(root / "timed", model=work[0], optimizer=work[4], defer_statistics=defer) as recorder:
            train_step(*work, stage=recorder.stage)  # first sight of every op and parameter: untimed
            recorder.step()
            synchronize(device)
            start = time.perf_counter()
            train_step(*work, stage=recorder.stage)
            recorder.step()
            synchronize(device)
            elapsed = time.perf_counter() - start
        shutil.rmtree(root / "timed")
        return elapsed

    result = paired_samples(plain, {"recorded": recorded}, rounds, 1, 1)
    return result["median_ms"]["plain"], result["median_ms"]["recorded"], result["ratio"]["recorded"]


def sync_free_step(work, device: str, root: Path, defer: bool) -> Exception | None:
    error = None
    with Recorder(root, model=work[0], optimizer=work[4], flush_events=10**9, defer_statistics=defer) as recorder:
        train_step(*work, stage=recorder.stage)
        recorder.step()
        synchronize(device)
        if device == "cuda":
            torch.cuda.set_sync_debug_mode("error")
        try:
            train_step(*work, stage=recorder.stage)
            recorder.step()
        except RuntimeError as exc:  # a synchronising call in the user's step or in the capture
            error = exc
        finally:
            if device == "cuda":
                torch.cuda.set_sync_debug_mode("default")
    return error


def counted(root: Path) -> tuple[list[str], int, dict[tuple[str, str], int], set[str]]:
    """(validation problems, states without statistics, {(counter, op): value} of the last
    recorded step with backend twins under one name, the ops seen)."""
    from spiketrace.analyze import open_trace
    from spiketrace.analyze.counters import count

    with open_trace(root) as trace:
        problems = trace.validate()
        unfilled = int(trace.sql("SELECT count(*) AS n FROM tensors WHERE nnz IS NULL AND NOT is_meta")["n"][0])
        last = int(trace.sql("SELECT max(step) AS s FROM events")["s"][0])
        frame = count(trace, [*EXACT_COUNTERS, *VALUE_COUNTERS], step=last).frame
        ops = set(trace.sql(f"SELECT DISTINCT op FROM events WHERE step = {last}")["op"])
    frame = frame[frame["scope"] == "Global"]
    values: dict[tuple[str, str], int] = {}
    for counter, op, value in zip(frame["counter"], frame["op"], frame["value"]):
        key = (counter, BACKEND_TWINS.get(op, op))
        values[key] = values.get(key, 0) + int(value)
    return problems, unfilled, values, ops


def compare_counts(name: str, device_values: dict, cpu_values: dict) -> None:
    for counter in (*EXACT_COUNTERS, *VALUE_COUNTERS):
        ops = {op for c, op in device_values.keys() | cpu_values.keys() if c == counter}
        tolerance = 0.0 if counter in EXACT_COUNTERS else 0.01
        differing = []
        for op in sorted(ops):
            a, b = device_values.get((counter, op), 0), cpu_values.get((counter, op), 0)
            if abs(a - b) > tolerance * max(abs(a), abs(b)):
                differing.append(f"{op} {a} vs {b}")
        check(f"{name}: {counter} equals the CPU capture's per op", not differing, "; ".join(differing[:4]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device here: nothing to check (run this on a machine with a CUDA GPU); skipped")
        return
    defer = device == "cpu"  # on CPU, the path a GPU run takes
    if device == "cuda":
        print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, cuDNN {torch.backends.cudnn.version()}")
    scratch = Path(tempfile.mkdtemp(prefix="spiketrace-gpu-"))
    times = []
    for name in args.workloads.split(","):
        torch.manual_seed(0)
        reference = make(name)
        state = copy.deepcopy(reference[0].state_dict())
        work = on(device, reference)
        # first, from the weights the CPU capture starts from too: two recorded steps, the
        # second under the sync check and compared with the CPU's second
        error = sync_free_step(work, device, scratch / name / "sync", defer)
        manifest = json.loads((scratch / name / "sync" / "manifest.json").read_text())
        check(f"{name}: a recorded step ran under set_sync_debug_mode('error')", error is None, repr(error or ""))
        check(f"{name}: the capture degraded nowhere", manifest["degraded"] == [], json.dumps(manifest["degraded"])[:300])
        problems, unfilled, device_values, device_ops = counted(scratch / name / "sync")
        check(f"{name}: the trace validates", problems == [], "; ".join(problems[:3]))
        check(f"{name}: every statistic filled in at close", unfilled == 0, f"{unfilled} states without nnz")

        torch.manual_seed(0)
        cpu = on("cpu", make(name), state)
        sync_free_step(cpu, "cpu", scratch / name / "cpu", False)
        _, _, cpu_values, cpu_ops = counted(scratch / name / "cpu")
        print(f"      {name}: ops of the device only {sorted(device_ops - cpu_ops)}; of the CPU only "
              f"{sorted(cpu_ops - device_ops)}")
        compare_counts(name, device_values, cpu_values)
        if device == "cuda" and name == "vgg":  # cuDNN's batch norm and SpikingJelly's CUDA neurons
            check("vgg: cudnn_batch_norm and a SpikingJelly CUDA neuron op recorded",
                  "aten.cudnn_batch_norm.default" in device_ops and any(op.startswith("sj_") for op in device_ops),
                  str(sorted(device_ops)[:12]))
        times.append((name, *step_times(work, device, args.rounds, scratch / name, defer),
                      1.5 if name in CONV_NETS else 2.0))
    print(f"\n{'workload':<12} {'plain ms':>9} {'recorded ms':>12} {'ratio':>7} {'goal':>6}")
    for name, plain, recorded, ratio, goal in times:
        print(f"{name:<12} {plain:>9.1f} {recorded:>12.1f} {ratio:>6.2f}x {goal:>5.1f}x"
              f"{'' if ratio <= goal else '  over the goal'}")
    print("all checks passed" if not FAILED else f"{len(FAILED)} checks failed: {FAILED}")
    sys.exit(1 if FAILED else 0)


if __name__ == "__main__":
    main()
