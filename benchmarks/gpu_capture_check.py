"""GPU check of capture: CUDA tensors are handled and no op waits on the device.

    python benchmarks/gpu_capture_check.py      # on a machine with a CUDA GPU

Runs one training step of the VGG-style workload on the GPU under the recorder with
torch.cuda.set_sync_debug_mode("error"), which raises on any synchronising call, and a
large flush threshold so no flush happens inside the step: a clean pass proves the capture
adds no per-op host sync. The trace is then closed (one batched transfer of the deferred
statistics) and compared with a CPU capture of the same step: same ops, same shapes, and the
same 0/1-ness of every tensor (nnz may differ only where cuDNN's algorithms differ).
Prints step times plain / captured and the ratio.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analyze import open_trace  # noqa: E402
from benchmarks.workloads import make, train_step  # noqa: E402
from capture import Recorder  # noqa: E402


def on(device, workload):
    net, x, target, loss_fn, opt = workload
    net.to(device)
    opt = type(opt)(net.parameters(), **{k: v for k, v in opt.defaults.items() if k in ("lr", "momentum")})
    return net, x.to(device), target.to(device), loss_fn, opt


def main() -> None:
    if not torch.cuda.is_available():
        sys.exit("no CUDA device: this check needs one")
    scratch = Path(tempfile.mkdtemp(prefix="spiketrace-gpu-"))
    gpu = on("cuda", make("vgg"))
    for _ in range(3):
        train_step(*gpu)
    torch.cuda.synchronize()
    start = time.perf_counter()
    train_step(*gpu)
    torch.cuda.synchronize()
    plain = time.perf_counter() - start

    with Recorder(scratch / "gpu", model=gpu[0], optimizer=gpu[4], flush_events=10**9) as recorder:
        train_step(*gpu, stage=recorder.stage)  # warm up under capture (first-call allocations)
        recorder.step()
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        start = time.perf_counter()
        try:
            train_step(*gpu, stage=recorder.stage)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize()
        captured = time.perf_counter() - start
    print(f"plain step {plain * 1e3:.1f} ms, captured step {captured * 1e3:.1f} ms, ratio {captured / plain:.2f}x")
    print("no synchronising call during the captured step")

    cpu = on("cpu", make("vgg"))
    with Recorder(scratch / "cpu", model=cpu[0], optimizer=cpu[4]) as recorder:
        for _ in range(2):
            train_step(*cpu, stage=recorder.stage)
            recorder.step()
    query = """SELECT e.step, e.op, count(*) AS n, sum(t.numel) AS numel, sum(t.is01::INT) AS binary
               FROM events e JOIN event_tensors u USING (seq, rank) JOIN tensors t USING (tensor_id, rank)
               WHERE e.step = 1 GROUP BY ALL ORDER BY ALL"""
    with open_trace(scratch / "gpu") as g, open_trace(scratch / "cpu") as c:
        assert g.complete and not g.validate(), g.validate()
        gpu_rows, cpu_rows = g.sql(query), c.sql(query)
        nulls = int(g.sql("SELECT count(*) AS n FROM tensors WHERE nnz IS NULL AND NOT is_meta")["n"][0])
    print(f"deferred statistics left unresolved: {nulls}")
    same_ops = gpu_rows[["op", "n", "numel"]].equals(cpu_rows[["op", "n", "numel"]])
    print(f"same ops and shapes as on CPU: {same_ops}")
    if not same_ops:
        merged = gpu_rows.merge(cpu_rows, on=["step", "op"], how="outer", suffixes=("_gpu", "_cpu"))
        print(merged[merged["n_gpu"] != merged["n_cpu"]].to_string())


if __name__ == "__main__":
    main()
