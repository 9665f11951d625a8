"""neuron_state from a trace equals SpikingJelly 2.0.0's NeuronStateCounter on the same run.

The counter is a replay of a state machine (which storages are neuron state at each op), so
the differential suite checks all three of its views on every zoo model, forward-only and
with both optimizers; a hand-derived case pins the formulas; the default mode's fix of
SpikingJelly's first-call artifact is checked against SpikingJelly counting each neuron alone.
"""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner
from spikingjelly.activation_based import neuron
from spikingjelly.activation_based.op_counter import DispatchCounterMode, NeuronStateCounter
from torch import nn
from torch.overrides import resolve_name

from spiketrace.analyze import open_trace
from spiketrace.analyze.cli import main
from spiketrace.analyze.counters import count
from spiketrace.analyze.counters.neuron_state import METRICS, replay
from spiketrace.capture import Recorder
from tests.zoo import CASE_IDS, CASES, OPTIMIZERS, build, run_steps


def views(counter: NeuronStateCounter) -> dict:
    return {
        "counts": {s: {resolve_name(o): int(v) for o, v in ops.items()} for s, ops in counter.get_counts().items()},
        "metrics": counter.get_metric_counts(),
        "projection": counter.get_projection_counts(),
    }


def offline_views(trace, **options) -> dict:
    result = count(trace, ["neuron_state"], **options)
    return {
        "counts": result.spikingjelly("neuron_state"),
        "metrics": result.details_of("neuron_state", "metrics"),
        "projection": result.details_of("neuron_state", "projection"),
    }


@pytest.mark.parametrize("optimizer_name", [None, "sgd_momentum", "adam"], ids=["forward", "sgd", "adam"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_neuron_state_equals_spikingjelly_in_compat_mode(tmp_path, case, optimizer_name):
    model, x = build(case)
    optimizer = OPTIMIZERS[optimizer_name](model.parameters()) if optimizer_name else None
    counter = NeuronStateCounter()
    with DispatchCounterMode([counter], strict=False), \
            Recorder(tmp_path / "trace", model=model, optimizer=optimizer) as recorder:
        run_steps(recorder, model, x, case, optimizer)
    with open_trace(tmp_path / "trace") as trace:
        assert offline_views(trace, compat="spikingjelly") == views(counter)


def test_ignored_neurons_count_nothing_like_spikingjelly(tmp_path):
    case = CASES[3]  # multi-step LIF / IF / PLIF
    model, x = build(case)
    counter = NeuronStateCounter()  # it takes no extra_ignore_modules, but honours the base list
    counter.ignore_modules.append(neuron.LIFNode)
    with DispatchCounterMode([counter], strict=False), Recorder(tmp_path / "trace", model=model) as recorder:
        run_steps(recorder, model, x, case)
    with open_trace(tmp_path / "trace") as trace:
        got = offline_views(trace, compat="spikingjelly",
                            ignore_modules=[neuron.LIFNode])
    assert got == views(counter)


def test_hand_derived_if_node_two_calls(tmp_path):
    """IFNode (v_th=1, hard reset to 0), x = [0.5, 1.5, 0, 2] float32 (16 bytes), called twice.

    State storages are v's; a write registers its output as state. Per op (reads/writes in
    bytes, ops in elements), first call (v materialised by full_like, registered):
      add(v, x)            reads 16, writes 16, adds 4  -> h = [.5, 1.5, 0, 2]
      sub(h, 1.0)          reads 16, writes 16, adds 4  (its output becomes state)
      ge(h - 1, 0)         reads 16, comps 4            -> spike = [0, 1, 0, 1]
      mul(1 - spike, h)    driver 1 - spike (binary, nnz 2): reads 2*4, writes 2*4, muls 4, reset+triggered 4
      add(., spike * 0)    driver spike*0 (nnz 0): reads 0, writes 0, adds 4, reset+triggered 4
      stack([v])           reads 16
    second call: h = [1, 1.5, 0, 2], spike = [1, 1, 0, 1], so the gated mul moves 1*4 bytes;
    every other op as before.
    """
    node = neuron.IFNode()
    x = torch.tensor([0.5, 1.5, 0.0, 2.0])
    with Recorder(tmp_path / "trace", model=node):
        node(x)
        node(x)
    per_call = [
        ("aten.add.Tensor", dict(state_reads=16, state_writes=16, state_adds=4, timestep_dense_ops=4)),
        ("aten.sub.Tensor", dict(state_reads=16, state_writes=16, state_adds=4, timestep_dense_ops=4)),
        ("aten.ge.Scalar", dict(state_reads=16, state_comps=4)),
        ("aten.mul.Tensor", dict(state_reads=8, state_writes=8, state_muls=4, state_reset_ops=4, spike_triggered_ops=4)),
        ("aten.add.Tensor", dict(state_adds=4, state_reset_ops=4, spike_triggered_ops=4)),
        ("aten.stack.default", dict(state_reads=16)),
    ]
    second = [(op, dict(m)) for op, m in per_call]
    second[3][1].update(state_reads=4, state_writes=4)
    with open_trace(tmp_path / "trace") as trace:
        rows = replay(trace.con)
        ops = dict(trace.sql("SELECT seq, op FROM events").itertuples(index=False))
        result = count(trace, ["neuron_state"])
    got = [(ops[seq], {m: int(rows.iloc[i][m]) for m in METRICS if rows.iloc[i][m]}) for i, seq in enumerate(rows["seq"])]
    assert got == per_call + second
    totals = result.details_of("neuron_state", "metrics")["Global"]
    assert totals["state_reads"] == 2 * (16 * 4 + 0) + 8 + 4 + 16 * 0
    assert totals["state_writes"] == 2 * 32 + 8 + 4
    projection = result.details_of("neuron_state", "projection")["Global"]
    assert projection["potential_buffer_bytes"] == 16  # a maximum, not a sum
    assert projection["state_acc_like"] == 2 * (4 + 4 + 4 + 4)


class Capture(nn.Module):
    """Keeps the input of the wrapped neuron's forward, to re-run it alone."""

    def __init__(self):
        super().__init__()
        self.inputs: list[torch.Tensor] = []

    def forward(self, x):
        self.inputs.append(x.detach().clone())
        return x


def test_default_counts_every_neuron_on_its_first_call(tmp_path):
    """SpikingJelly tracks a float state's materialisation only when no state storage is alive,
    so in Sequential(Linear, IF, Linear, IF) the second IF counts 0 on a fresh forward. By
    default every neuron counts what SpikingJelly counts for that neuron run alone."""
    torch.manual_seed(0)
    tap = Capture()
    model = nn.Sequential(nn.Linear(6, 5), neuron.IFNode(), nn.Linear(5, 4), tap, neuron.IFNode())
    x = torch.rand(3, 6) * 2
    counter = NeuronStateCounter()
    with DispatchCounterMode([counter]), Recorder(tmp_path / "trace", model=model):
        model(x)
    alone = NeuronStateCounter()
    with DispatchCounterMode([alone]):
        neuron.IFNode()(tap.inputs[0])
    with open_trace(tmp_path / "trace") as trace:
        compat = offline_views(trace, compat="spikingjelly")
        default = offline_views(trace)
    assert compat == views(counter)
    assert "Sequential.4" not in compat["metrics"]  # SpikingJelly's artifact
    assert default["metrics"]["Sequential.4"] == alone.get_metric_counts()["Global"]
    assert default["metrics"]["Sequential.1"] == compat["metrics"]["Sequential.1"]


def test_cli_json_has_the_three_views(tmp_path):
    node = neuron.IFNode(step_mode="m")
    with Recorder(tmp_path / "trace", model=node):
        node(torch.rand(4, 2, 3) * 2)
    result = CliRunner().invoke(main, ["counts", str(tmp_path / "trace"), "--counter", "neuron_state", "--format", "json"])
    assert result.exit_code == 0, result.output
    entry = json.loads(result.stdout)["counters"]["neuron_state"]
    assert entry["total"] == sum(entry["metrics"]["Global"].values()) > 0
    assert entry["projection"]["Global"]["read_potential"] == entry["metrics"]["Global"]["state_reads"]
    assert entry["unsupported"] == {} and entry["coverage"] == 1.0
