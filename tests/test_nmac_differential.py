"""Neuromorphic memory access from a trace equals SpikingJelly's module-level counter."""

from __future__ import annotations

import pytest
from spikingjelly.activation_based.op_counter import ModuleCounterMode, NeuromorphicMemoryAccessCounter
from torch import nn

from spiketrace.analyze import open_trace
from spiketrace.analyze.counters import count
from spiketrace.analyze.counters.neuromorphic_memory_access import as_spikingjelly, neuromorphic_memory_access
from spiketrace.analyze.counters.sql import MACROS
from spiketrace.capture import Recorder
from tests.zoo import CASE_IDS, CASES, OPTIMIZERS, build, reset


def run(tmp_path, case, optimizer_name, ignore=None):
    model, x = build(case)
    optimizer = OPTIMIZERS[optimizer_name](model.parameters()) if optimizer_name else None
    counter = NeuromorphicMemoryAccessCounter(extra_ignore_modules=ignore)
    with Recorder(tmp_path / "trace", model=model, optimizer=optimizer) as recorder, \
            ModuleCounterMode([counter], model=model):
        for _ in range(2):
            with recorder.stage("forward"):
                out = model(x)
            if optimizer:
                with recorder.stage("backward"):
                    case.loss_fn(out, case.target(out)).backward()
                with recorder.stage("optimizer"):
                    optimizer.step()
                    optimizer.zero_grad()
            reset(model)
    return counter.get_counts()


@pytest.mark.parametrize("optimizer_name", [None, "sgd_momentum"], ids=["forward", "sgd"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_nmac_equals_spikingjelly(tmp_path, case, optimizer_name):
    expected = run(tmp_path, case, optimizer_name)
    with open_trace(tmp_path / "trace") as trace:
        for macro in MACROS:
            trace.con.execute(macro)
        got = as_spikingjelly(neuromorphic_memory_access(trace))
        through_api = count(trace, ["neuromorphic_memory_access"]).spikingjelly("neuromorphic_memory_access")
    assert got == expected
    assert through_api == expected


def test_nmac_ignore_list_equals_spikingjelly(tmp_path):
    expected = run(tmp_path, CASES[1], None, ignore=[nn.Conv2d])
    with open_trace(tmp_path / "trace") as trace:
        for macro in MACROS:
            trace.con.execute(macro)
        got = as_spikingjelly(neuromorphic_memory_access(trace, ["torch.nn.modules.conv.Conv2d"]))
    assert got == expected
