"""SpikingJelly's fused neuron ops (sj_if, sj_lif) count as their CPU decomposition
(analyze/counters/sj_neuron_ops.py).

On meta tensors, as on CUDA, a multi-step IFNode/LIFNode call is one `sj_<neuron>.forward` op
and its gradient one `sj_<neuron>.backward`; on CPU the same module call runs as per-step aten
ops and autograd differentiates them. Both are recorded and counted here:
* forward: the stage totals are equal, per counter (flop, memory_access, ac);
* backward: the CPU stage (autograd of the decomposition) equals the meta stage without the
  fused path's own `zeros_like` (SpikingJelly's wrapper materialising the final v's missing
  gradient, work only that path does);
* mac and synop do not apply (the neuron's products are elementwise, not synaptic).
"""

from __future__ import annotations

import json
import warnings

import duckdb
import pytest
import torch
from spikingjelly.activation_based import neuron, surrogate

from spiketrace.analyze import open_trace
from spiketrace.analyze.counters import count, sj_neuron_ops
from spiketrace.analyze.counters.sql import MACROS
from spiketrace.capture import Recorder

COMPARED = ["flop", "memory_access", "ac"]
ALL = ["flop", "memory_access", "mac", "ac", "synop"]
WRAPPER = "aten.zeros_like.default"  # the fused backward's materialised grad_v (meta only)

CONFIGS = {
    # the workloads' neurons (benchmarks/workloads.py): LIF tau 2 hard reset, IF detach_reset
    "lif": (neuron.LIFNode, dict(tau=2.0, surrogate_function=surrogate.ATan()), (4, 2, 3)),
    "if_detach": (neuron.IFNode, dict(surrogate_function=surrogate.ATan(), detach_reset=True), (4, 2, 3, 4, 4)),
    "lif_no_decay": (neuron.LIFNode, dict(tau=2.0, decay_input=False, surrogate_function=surrogate.ATan()), (4, 2, 3)),
    "lif_soft": (neuron.LIFNode, dict(tau=3.0, v_reset=None), (4, 2, 3, 4, 4)),  # Sigmoid surrogate
    "lif_soft_detach": (neuron.LIFNode, dict(tau=2.0, v_reset=None, detach_reset=True,
                                             surrogate_function=surrogate.ATan()), (4, 2, 3)),
    "if_hard": (neuron.IFNode, dict(v_reset=0.0), (4, 2, 5)),
    "if_soft_v_seq": (neuron.IFNode, dict(v_reset=None, store_v_seq=True,
                                          surrogate_function=surrogate.ATan()), (4, 2, 3)),
    # ParametricLIFNode: LIF with sigmoid(w) for 1 / tau, and w's own gradient
    "plif": (neuron.ParametricLIFNode, dict(init_tau=2.0, surrogate_function=surrogate.ATan()), (4, 2, 3)),
    "plif_no_decay": (neuron.ParametricLIFNode, dict(init_tau=3.0, decay_input=False), (5, 2, 3, 2)),
    "plif_soft_detach": (neuron.ParametricLIFNode, dict(v_reset=None, detach_reset=True, store_v_seq=True,
                                                        surrogate_function=surrogate.ATan()), (3, 4)),
    "plif_no_decay_soft": (neuron.ParametricLIFNode, dict(decay_input=False, v_reset=None,
                                                          surrogate_function=surrogate.Erf()), (4, 3)),
    "plif_hard_v_seq": (neuron.ParametricLIFNode, dict(v_reset=-0.5, store_v_seq=True), (2, 2, 5)),
}
FUSED_NAME = {neuron.IFNode: "sj_if", neuron.LIFNode: "sj_lif", neuron.ParametricLIFNode: "sj_plif"}


def _record(path, device, config):
    node_type, options, shape = CONFIGS[config]
    node = node_type(step_mode="m", **options).to(device)
    torch.manual_seed(0)
    x = torch.randn(*shape).to(device).requires_grad_(True)
    grad = torch.randn(*shape).to(device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with Recorder(path) as recorder:
            with recorder.stage("forward"):
                spikes = node(x)
            with recorder.stage("backward"):
                spikes.backward(grad)
    return path


def _stage_totals(path, skip=()):
    with open_trace(path) as trace:
        result = count(trace, COMPARED, by=("stage",))
    frame = result.frame[(result.frame.scope == "Global") & ~result.frame.op.isin(skip)]
    return frame.groupby(["counter", "stage"])["value"].sum().to_dict()


@pytest.mark.parametrize("config", list(CONFIGS))
def test_fused_op_counts_as_its_cpu_decomposition(tmp_path, config):
    meta = _record(tmp_path / "meta", "meta", config)
    cpu = _record(tmp_path / "cpu", "cpu", config)
    name = FUSED_NAME[CONFIGS[config][0]]
    with open_trace(meta) as trace:
        ops = set(trace.sql("SELECT DISTINCT op FROM events")["op"])
        assert {f"{name}.forward.default", f"{name}.backward.default"} <= ops
        result = count(trace, ALL, strict=True)  # every op has a rule or is not applicable
        assert not len(result.unsupported)
    with open_trace(cpu) as trace:
        assert not any(op.startswith("sj_") for op in trace.sql("SELECT DISTINCT op FROM events")["op"])
    fused, decomposed = _stage_totals(meta, skip=(WRAPPER,)), _stage_totals(cpu)
    for counter in COMPARED:
        for stage in ("forward", "backward"):
            assert fused[counter, stage] == decomposed[counter, stage], (counter, stage)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_input_current(tmp_path, dtype):
    # x in 16 bits with a float32 v_init (the modules' v follows x, so only a functional call
    # reaches the fused op this way): spikes are cast to x's dtype, gradients to and from float32
    from spikingjelly.activation_based.functional import if_multi_step

    def run(device):
        torch.manual_seed(0)
        x = torch.randn(4, 2, 3).to(dtype).to(device).requires_grad_(True)
        v, grad = torch.zeros(2, 3).to(device), torch.randn(4, 2, 3).to(dtype).to(device)
        with Recorder(tmp_path / device) as recorder:
            with recorder.stage("forward"):
                spikes, _, _ = if_multi_step(x, v, 1.0, 0.0, surrogate.ATan(), False)
            with recorder.stage("backward"):
                spikes.backward(grad)
        return _stage_totals(tmp_path / device, skip=(WRAPPER,))

    assert run("meta") == run("cpu")


@pytest.mark.parametrize("x_dtype,w_dtype,trained", [
    (torch.float32, torch.float32, False),  # a frozen w: no gradient of w on CPU
    (torch.bfloat16, torch.float32, True),  # x.float() each step, gradients cast back
    (torch.float32, torch.float16, True),   # w.float() once, its gradient cast back
])
def test_plif_dtypes_and_frozen_w(tmp_path, x_dtype, w_dtype, trained):
    # sj_plif.forward called as SpikingJelly's wrapper calls it (x_seq, v_init, w, decay_input,
    # threshold, reset, detach_reset, alpha, store_v_seq, surrogate_id)
    import spikingjelly._ops.plif  # noqa: F401  registers torch.ops.sj_plif

    def run(device):
        torch.manual_seed(0)
        x = torch.randn(4, 2, 3).to(x_dtype).to(device).requires_grad_(True)
        w = torch.tensor(-0.3, dtype=w_dtype, device=device).requires_grad_(trained)
        v, grad = torch.zeros(2, 3, device=device), torch.randn(4, 2, 3).to(x_dtype).to(device)
        with Recorder(tmp_path / device) as recorder:
            with recorder.stage("forward"):
                spikes, _, _ = torch.ops.sj_plif.forward(x, v, w, True, 1.0, 0.0, False, 4.0, False, 1)
            with recorder.stage("backward"):
                spikes.backward(grad)
        return _stage_totals(tmp_path / device, skip=(WRAPPER,))

    fused, decomposed = run("meta"), run("cpu")
    assert fused == decomposed
    # w's gradient is work only when w is trained: backward FLOPs differ by its terms
    assert fused["flop", "backward"] > 0


def _lif_by_hand(tmp_path):
    return _stage_totals(_record(tmp_path / "meta", "meta", "lif"), skip=(WRAPPER,))


def test_lif_counts_by_hand(tmp_path):
    # LIF (decay_input, hard reset 0.0, ATan), T = 4, E = 2 * 3 = 6: n = T * E = 24 element-steps,
    # of which (T - 1) * E = 18 carry a gradient from one step to the one before.
    got = _lif_by_hand(tmp_path)
    n, chained = 24, 18
    # forward per element-step: charge sub, sub, div, add; fire sub, ge; reset mul, rsub, mul, add
    assert got["flop", "forward"] == 10 * n
    assert got["ac", "forward"] == 6 * n  # the subs and adds, none with two binary operands
    # bytes: charge 40, fire 18, reset 40, stacks of spikes and h 16 = 114, + v_init's full_like 4
    assert got["memory_access", "forward"] == 114 * n + 4 * 6
    # backward: ATan's gradient 5 + its product 1 + x's div by tau 1 every step; step to step
    # the reset's 3 mul, neg, 3 add and the charge's neg and add
    assert got["flop", "backward"] == 7 * n + 9 * chained
    assert got["ac", "backward"] == 1 * n + 4 * chained


def test_plif_counts_by_hand(tmp_path):
    # PLIF as test_lif_counts_by_hand's LIF (T = 4, E = 6, n = 24, chained 18), with q = sigmoid(w)
    got = _stage_totals(_record(tmp_path / "meta", "meta", "plif"), skip=(WRAPPER,))
    n, chained, steps = 24, 18, 4
    # forward: LIF's 10 per element-step (mul by q for div by tau), plus sigmoid(w) once: 4
    assert got["flop", "forward"] == 10 * n + 4
    # bytes: LIF's 114 n + v_init's 24, q's 4 B in each step's product, sigmoid's 4 + 4
    assert got["memory_access", "forward"] == 114 * n + 4 * 6 + 4 * steps + 8
    # backward: LIF's 7 n + 9 chained, and w's gradient: grad * (x - (v - 0)) each element-step,
    # each step's sum to a scalar (E - 1 adds), the steps' 3 scalar adds, sigmoid_backward 1
    assert got["flop", "backward"] == 7 * n + 9 * chained + n + (n - steps) + (steps - 1) + 1
    assert got["ac", "backward"] == 1 * n + 4 * chained + (n - steps) + (steps - 1)


# -- value-dependent ACs: the rule over the facts a CUDA trace records ---------------------------
# (a CPU run cannot record the op whole: its autograd kernel decomposes it, inference mode too)

def _ac_of_fused_lif(x, v, decay_input):
    """sj_lif.forward's AC rule over x's and v_init's recorded facts (is01, nnz, numel)."""
    con = duckdb.connect()
    for macro in MACROS:
        con.execute(macro)
    args = json.dumps([{"$t": 0}, {"$t": 1}, 2.0, decay_input, 1.0, 0.0, False, 2.0, False, 1])
    facts = {f"a{i}_{fact}": value for i, t in enumerate((x, v)) for fact, value in (
        ("numel", t.numel()), ("bytes", 4 * t.numel()), ("nnz", int(t.count_nonzero())),
        ("is01", bool(((t == 0) | (t == 1)).all())))}
    row = ", ".join(f"{value!r} AS {name}" for name, value in facts.items())
    rule = sj_neuron_ops.AC["sj_lif.forward.default"]
    return con.execute(f"SELECT {rule} FROM (SELECT {row}, '{args}' AS args)").fetchone()[0]


def _ac_of_decomposition(tmp_path, x, v, decay_input):
    with Recorder(tmp_path / "steps") as recorder, recorder.stage("forward"), torch.no_grad():
        torch.ops.sj_lif.forward(x, v, 2.0, decay_input, 1.0, 0.0, False, 2.0, False, 1)
    with open_trace(tmp_path / "steps") as trace:
        frame = count(trace, ["ac"]).frame
    return int(frame[frame.scope == "Global"]["value"].sum())


@pytest.mark.parametrize("v_init", ["zeros", "ones", "float"])
def test_ac_follows_the_recorded_values(tmp_path, v_init):
    # without decay_input the first step subtracts (v_init - 0.0) / tau from v_init: with v_init
    # all zero both operands are binary and CPU counts nnz + nnz = 0 for those E = 6 elements
    # (all one: 6 + 3 * 0.5 is not binary, dense)
    torch.manual_seed(0)
    x = torch.randn(4, 2, 3)
    v = {"zeros": torch.zeros(2, 3), "ones": torch.ones(2, 3), "float": torch.randn(2, 3)}[v_init]
    expected = 6 * 24 - (6 if v_init == "zeros" else 0)
    assert _ac_of_fused_lif(x, v, False) == _ac_of_decomposition(tmp_path, x, v, False) == expected


def test_binary_input_current_leaves_ac_unknown():
    # a binary x pairs binary operands in the decomposition's adds (the first step's with a zero
    # v_init), values the fused op hides: unknown (NULL), not a guess
    x = (torch.rand(4, 2, 3) < 0.5).float()
    assert _ac_of_fused_lif(x, torch.zeros(2, 3), True) is None
    assert _ac_of_fused_lif(torch.randn(4, 2, 3), torch.zeros(2, 3), True) == 6 * 24
