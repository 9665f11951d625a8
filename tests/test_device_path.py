"""The device path on CPU: with defer_statistics=True a CPU run records through exactly the code
a GPU run does (the compiled record, every statistic queued on the tensor's device and filled in
at flush), and its trace equals the compiled CPU path's column for column on every zoo model,
whether a CPU tensor's counts come from the CPU's own kernel (the compiled scan) or, with the
fast path native_statistics off, from the torch reductions and batches a CUDA tensor's take.
Storage pointers are left out (the allocator's choice, see tests/test_fast_paths.py); the
counters' numbers, which read them, are compared instead."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from spiketrace.capture import Recorder
from spiketrace.capture.session.fast_paths import ENVIRONMENT_VARIABLE
from tests import zoo
from tests.test_fast_paths import read_tables


def capture(path, case, monkeypatch=None, slow_paths="", **options) -> tuple[dict[str, pd.DataFrame], int]:
    model, x = zoo.build(case)
    optimizer = torch.optim.Adam(model.parameters())
    if slow_paths:
        monkeypatch.setenv(ENVIRONMENT_VARIABLE, slow_paths)
    with Recorder(path, model=model, optimizer=optimizer, keep_binary_inputs=True, flush_events=64,
                  **options) as recorder:
        zoo.run_steps(recorder, model, x, case, optimizer)
        compiled = recorder.ops.native.recorded if recorder.ops.native is not None else 0
    if slow_paths:
        monkeypatch.delenv(ENVIRONMENT_VARIABLE)
    return read_tables(path), compiled


@pytest.mark.parametrize("kernels", ["cpu", "torch"])
@pytest.mark.parametrize("case", zoo.CASES, ids=zoo.CASE_IDS)
def test_the_device_path_records_what_the_cpu_path_records(tmp_path, monkeypatch, case, kernels):
    cpu, cpu_compiled = capture(tmp_path / "cpu", case)
    slow = "native_statistics" if kernels == "torch" else ""
    device, device_compiled = capture(tmp_path / "device", case, monkeypatch, slow, defer_statistics=True)
    assert device["tensors"]["nnz"].notna().all() or cpu["tensors"]["nnz"].isna().any()
    # One record path: the deferred run takes the compiled record for the ops the CPU run does
    # (flush_events=64 flushes the pending statistics many times on the way).
    assert cpu_compiled > 0 and device_compiled == cpu_compiled
    for table, frame in cpu.items():
        try:
            pd.testing.assert_frame_equal(device[table], frame, check_dtype=True)
        except AssertionError as exc:
            raise AssertionError(f"{table} differs on the device path: {exc}") from None
