"""GPU check of capture: CUDA tensors are handled, no op waits on the device, and the CUDA
kernels users run (cuDNN batch norm, SpikingJelly's fused neuron kernels) are recorded with
their arguments.

    python benchmarks/gpu_capture_check.py      # on a machine with a CUDA GPU; ~1 minute

On a machine without CUDA it says so and exits 0 (nothing to check). Otherwise:

1. One training step of the VGG-style SNN workload (benchmarks/workloads.py, SpikingJelly
   LIF neurons, BatchNorm) runs on the GPU under the recorder with
   torch.cuda.set_sync_debug_mode("error"), which raises on any synchronising call, and a
   flush threshold no step reaches: the step must run through and the manifest's `degraded`
   list must stay empty (a sync inside the capture would be caught there, not raised).
2. The trace holds cuDNN's batch-norm ops (forward and backward) and SpikingJelly's CUDA
   neuron ops (`sj_lif.forward` / `sj_lif.backward`, one fused kernel each) with their
   non-tensor arguments, and every deferred statistic was resolved at close.
3. The same step captured on CPU is compared op family by op family (on CPU batch norm is
   `native_batch_norm` and the neuron op is decomposed into aten ops: listed, not failed).

Prints PASS/FAIL per check and step times plain / captured; exits 1 if a check failed.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.workloads import make, train_step  # noqa: E402
from spiketrace.capture import Recorder  # noqa: E402

FAILED: list[str] = []


def check(name: str, ok: bool, detail: str = "") -> None:
    print(f"{'PASS' if ok else 'FAIL'}  {name}" + (f": {detail}" if detail else ""), flush=True)
    if not ok:
        FAILED.append(name)


def on(device, workload):
    net, x, target, loss_fn, opt = workload
    net.to(device)
    opt = type(opt)(net.parameters(), **{k: v for k, v in opt.defaults.items() if k in ("lr", "momentum")})
    return net, x.to(device), target.to(device), loss_fn, opt


def events(root: Path):
    from spiketrace.analyze import open_trace

    with open_trace(root) as trace:
        problems = trace.validate()
        rows = trace.sql("SELECT seq, step, op, args, kwargs FROM events ORDER BY seq")
        unresolved = int(trace.sql("SELECT count(*) AS n FROM tensors WHERE nnz IS NULL AND NOT is_meta")["n"][0])
        per_op = trace.sql("""SELECT e.op, count(DISTINCT e.seq) AS n FROM events e WHERE e.step = 1 GROUP BY ALL ORDER BY ALL""")
    return problems, rows, unresolved, dict(zip(per_op["op"], per_op["n"]))


def main() -> None:
    if not torch.cuda.is_available():
        print("no CUDA device here: nothing to check (run this on a machine with a CUDA GPU); skipped")
        return
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, cuDNN {torch.backends.cudnn.version()}")
    scratch = Path(tempfile.mkdtemp(prefix="spiketrace-gpu-"))
    gpu = on("cuda", make("vgg"))
    for _ in range(3):
        train_step(*gpu)
    torch.cuda.synchronize()
    start = time.perf_counter()
    train_step(*gpu)
    torch.cuda.synchronize()
    plain = time.perf_counter() - start

    error = None
    with Recorder(scratch / "gpu", model=gpu[0], optimizer=gpu[4], flush_events=10**9) as recorder:
        train_step(*gpu, stage=recorder.stage)  # warm up under capture (first-call allocations, caches)
        recorder.step()
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        start = time.perf_counter()
        try:
            train_step(*gpu, stage=recorder.stage)
        except RuntimeError as exc:  # a synchronising call in the user's step or in the capture
            error = exc
        finally:
            torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize()
        captured = time.perf_counter() - start
    manifest = json.loads((scratch / "gpu" / "manifest.json").read_text())
    print(f"plain step {plain * 1e3:.1f} ms, captured step {captured * 1e3:.1f} ms, ratio {captured / plain:.2f}x")
    check("the captured step ran under set_sync_debug_mode('error')", error is None, repr(error) if error else "")
    check("the capture degraded nowhere (no sync caught inside it)", manifest["degraded"] == [], json.dumps(manifest["degraded"]))

    problems, rows, unresolved, gpu_ops = events(scratch / "gpu")
    check("the trace validates", problems == [], "; ".join(problems[:3]))
    check("every deferred statistic was resolved at close", unresolved == 0, f"{unresolved} tensors without nnz")
    for wanted in ("aten.cudnn_batch_norm.default", "aten.cudnn_batch_norm_backward.default",
                   "sj_lif.forward.default", "sj_lif.backward.default"):
        found = rows[rows["op"] == wanted]
        example = "" if found.empty else f"{len(found)} calls, e.g. args {found['args'].iloc[0][:160]}"
        check(f"{wanted} recorded with its arguments", not found.empty and all(a != "[]" for a in found["args"]), example)
    neuron = rows[rows["op"] == "sj_lif.forward.default"]
    if not neuron.empty:  # the neuron's float parameters (tau, threshold, ...) are in the arguments
        args = json.loads(neuron["args"].iloc[0])
        check("sj_lif.forward's arguments hold its floats", any(isinstance(a, float) for a in args), str(args))

    cpu = on("cpu", make("vgg"))
    with Recorder(scratch / "cpu", model=cpu[0], optimizer=cpu[4]) as recorder:
        for _ in range(2):
            train_step(*cpu, stage=recorder.stage)
            recorder.step()
    _, _, _, cpu_ops = events(scratch / "cpu")
    only_gpu = {op: n for op, n in gpu_ops.items() if op not in cpu_ops}
    only_cpu = {op: n for op, n in cpu_ops.items() if op not in gpu_ops}
    differ = {op: (gpu_ops[op], cpu_ops[op]) for op in gpu_ops.keys() & cpu_ops.keys() if gpu_ops[op] != cpu_ops[op]}
    print(f"step 1 op families: GPU only {only_gpu}; CPU only {only_cpu}; counts differing {differ}")
    check("convolutions and linears match the CPU capture",
          all(gpu_ops.get(op) == cpu_ops.get(op) for op in ("aten.convolution.default", "aten.convolution_backward.default",
                                                            "aten.addmm.default")))
    print("all checks passed" if not FAILED else f"{len(FAILED)} checks failed: {FAILED}")
    sys.exit(1 if FAILED else 0)


if __name__ == "__main__":
    main()
