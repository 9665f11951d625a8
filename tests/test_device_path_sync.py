"""The device path waits on the device nowhere per op, checked on CPU: every Python-level call
that makes a host wait for a device (`.item()`, `.tolist()`, `.cpu()`, `.numpy()`, truth and
number conversions of a tensor) is counted while a zoo training step runs, plain and then
recorded on the device path with the kernels a CUDA tensor takes (defer_statistics=True, fast
path native_statistics off) and a flush threshold no step reaches. The recorded step must make
exactly the plain step's calls (the model's own, such as a neuron's reset): torch.cuda's
set_sync_debug_mode("error") is the same check on a GPU (benchmarks/gpu_capture_check.py)."""

from __future__ import annotations

from collections import Counter
from contextlib import contextmanager

import pytest
import torch

from spiketrace.capture import Recorder
from spiketrace.capture.session.fast_paths import ENVIRONMENT_VARIABLE
from tests import zoo

WAITING_CALLS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__")


@contextmanager
def counting_waits():
    """Counts of the waiting calls made on tensors inside the block."""
    calls: Counter = Counter()
    originals = {name: getattr(torch.Tensor, name) for name in WAITING_CALLS}

    def counted(name, original):
        def call(self, *args, **kwargs):
            calls[name] += 1
            return original(self, *args, **kwargs)
        return call

    for name, original in originals.items():
        setattr(torch.Tensor, name, counted(name, original))
    try:
        yield calls
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)


def step(model, x, case, recorder=None) -> Counter:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    zoo.run_steps(recorder, model, x, case, optimizer)  # a first step: the model's first-call work
    with counting_waits() as calls:
        zoo.run_steps(recorder, model, x, case, optimizer)
    return calls


@pytest.mark.parametrize("case", [c for c in zoo.CASES if c.name in ("mlp", "sew", "attention", "multistep")],
                         ids=lambda c: c.name)
def test_a_recorded_step_on_the_device_path_waits_where_the_plain_step_does(tmp_path, monkeypatch, case):
    plain = step(*zoo.build(case), case)
    model, x = zoo.build(case)
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, "native_statistics")  # the torch kernels CUDA takes
    with Recorder(tmp_path / "t", model=model, defer_statistics=True, flush_events=10**9, flush_bytes=10**12,
                  keep_binary_inputs=True) as recorder:
        monkeypatch.delenv(ENVIRONMENT_VARIABLE)
        recorded = step(model, x, case, recorder)
        assert recorder.registry.pending  # the statistics are still queued: nothing was fetched
    assert recorded == plain
