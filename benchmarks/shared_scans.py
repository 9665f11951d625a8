"""The capture's value passes on the calling thread alone against shared among torch's threads.

    python benchmarks/shared_scans.py [--repeats 200]

Each pass (capture/native/_native_parallel.c and its callers) is timed with every scan kept on the
calling thread (`parallel_scan(max_threads=1)`) and with the default sharing, alternating the
two sample by sample; medians in microseconds, and their ratio. Each sample follows a torch op
on a tensor of the same size, as in a training step, so torch's threads are as awake as they
are there. The counts are compared too: sharing must not change a single one.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from spiketrace.capture import native
from spiketrace.capture.ops import op_statistics


def _passes() -> dict:
    torch.manual_seed(0)
    passes = {}
    for megabytes in (0.25, 1, 8, 32):
        elements = int(megabytes * (1 << 20)) // 4
        dense, spikes = torch.randn(elements).relu(), (torch.rand(elements) < 0.2).float()
        passes[f"nnz of a {megabytes:g} MB activation"] = (dense, lambda t=dense: native.scan_stats(t))
        passes[f"nnz and 0/1 of {megabytes:g} MB of spikes"] = (spikes, lambda t=spikes: native.scan_stats(t))
    conv_input = torch.randn(32, 64, 16, 16).relu()
    passes["a 2 MB convolution input's nonzeros per position"] = (
        conv_input, lambda: op_statistics._compiled_spatial_counts(conv_input).sum().item())
    x, w = (torch.rand(512, 784) < 0.2).float(), torch.randn(800, 784)
    passes["nonzero pairs of a 512x784 @ (800x784).T matmul"] = (w, lambda: op_statistics._gemm_pairs(x, w.t()))
    # The record's common case: the output of the op that just ran, written by torch's threads
    # (an elementwise op shares its elements among them from 32768 on), scanned at once.
    for rows, columns in ((64, 400), (64, 800), (64, 1600)):
        a, b = torch.randn(rows, columns), torch.randn(rows, columns)
        product = torch.empty(rows, columns)
        passes[f"nnz and 0/1 of a {rows}x{columns} product torch just wrote"] = (
            product, lambda t=product: native.scan_stats(t), lambda a=a, b=b, t=product: torch.mul(a, b, out=t))
    return passes


def _sample(run, warm: torch.Tensor, write=None) -> tuple[float, object]:
    if write is not None:
        write()  # the op that writes the operand, as the op whose output the record scans
    else:
        warm.add_(0)  # a torch op first, as a scan follows one in a step
    start = time.perf_counter()
    value = run()
    return time.perf_counter() - start, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    if not native.AVAILABLE:
        raise SystemExit("spiketrace.capture.native._native is not built: nothing to compare")
    found, min_bytes, cap = native._native.parallel_scan()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; OpenMP runtime found: {found}; "
          f"shared from {min_bytes // 1024} KB; median of {args.repeats} samples each\n")
    print("| pass | one thread µs | shared µs | one / shared |")
    print("|---|---|---|---|")
    for name, (operand, run, *write) in _passes().items():
        times: dict[int, list[float]] = {1: [], cap: []}
        values = set()
        warm = torch.empty_like(operand)
        for _ in range(args.repeats):
            for threads in times:
                native._native.parallel_scan(max_threads=threads)
                elapsed, value = _sample(run, warm, *write)
                times[threads].append(elapsed)
                values.add(value)
        native._native.parallel_scan(max_threads=cap)
        if len(values) != 1:
            raise SystemExit(f"{name}: sharing changed the count ({sorted(values)})")
        alone, shared = (statistics.median(times[t]) * 1e6 for t in (1, cap))
        print(f"| {name} | {alone:.1f} | {shared:.1f} | {alone / shared:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
