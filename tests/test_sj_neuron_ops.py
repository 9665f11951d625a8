"""SpikingJelly's fused neuron ops (sj_if, sj_lif, sj_plif, sj_qif, sj_eif, sj_izhikevich) count
as their CPU decomposition (analyze/counters/sj_neurons/).

On meta tensors, as on CUDA, a multi-step neuron call is one `sj_<neuron>.forward` op
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
from spiketrace.analyze.counters import count, sj_neurons
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
    # QIFNode, EIFNode: LIF's loop with a nonlinear charge (default hard reset to -0.1)
    "qif": (neuron.QIFNode, dict(surrogate_function=surrogate.ATan()), (4, 2, 3)),
    "qif_soft_detach": (neuron.QIFNode, dict(v_reset=None, detach_reset=True, surrogate_function=surrogate.Erf()),
                        (4, 3)),
    "qif_hard_detach_v_seq": (neuron.QIFNode, dict(v_reset=0.0, detach_reset=True, store_v_seq=True), (3, 2, 2)),
    "eif": (neuron.EIFNode, dict(surrogate_function=surrogate.ATan()), (4, 2, 3)),
    "eif_soft_v_seq": (neuron.EIFNode, dict(v_reset=None, store_v_seq=True), (3, 4)),
    "eif_soft_detach": (neuron.EIFNode, dict(v_reset=None, detach_reset=True, surrogate_function=surrogate.ATan()),
                        (4, 2)),
    # IzhikevichNode with a <> 0 (with a = 0 its forward ACs depend on w_init's values, unknown
    # on meta: test_izhikevich_defaults_leave_forward_ac_unknown_on_meta)
    "izhikevich": (neuron.IzhikevichNode, dict(a=0.3, b=0.5, w_rest=0.1, surrogate_function=surrogate.ATan()),
                   (4, 2, 3)),
    "izhikevich_soft": (neuron.IzhikevichNode, dict(a=-0.2, v_reset=None), (5, 3)),
    "izhikevich_soft_detach_v_seq": (neuron.IzhikevichNode, dict(a=0.2, b=1.0, v_reset=None, detach_reset=True,
                                                                 store_v_seq=True, surrogate_function=surrogate.Erf()),
                                     (4, 2)),
    "izhikevich_hard_detach_v_seq": (neuron.IzhikevichNode, dict(a=0.2, detach_reset=True, store_v_seq=True,
                                                                 surrogate_function=surrogate.ATan()), (3, 2)),
    "izhikevich_one_step": (neuron.IzhikevichNode, dict(a=0.2), (1, 2)),
}
FUSED_NAME = {neuron.IFNode: "sj_if", neuron.LIFNode: "sj_lif", neuron.ParametricLIFNode: "sj_plif",
              neuron.QIFNode: "sj_qif", neuron.EIFNode: "sj_eif", neuron.IzhikevichNode: "sj_izhikevich"}


def _record(path, device, config):
    node_type, options, shape = CONFIGS[config] if isinstance(config, str) else config
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


@pytest.mark.parametrize("name,dtype", [("qif", torch.float16), ("eif", torch.bfloat16),
                                        ("izhikevich", torch.float16)])
def test_nonlinear_neurons_half_precision_input_current(tmp_path, name, dtype):
    # x in 16 bits, v (and w) float32, through the functional call: x.float() once, its
    # gradient stacked in float32 and cast back once; the spikes cast to x's dtype each step
    from spikingjelly.activation_based import functional

    def run(device):
        torch.manual_seed(0)
        x = torch.randn(4, 2, 3).to(dtype).to(device).requires_grad_(True)
        v, w, grad = torch.zeros(2, 3, device=device), torch.zeros(2, 3, device=device), \
            torch.randn(4, 2, 3).to(dtype).to(device)
        with Recorder(tmp_path / device) as recorder:
            with recorder.stage("forward"):
                if name == "izhikevich":
                    spikes = functional.izhikevich_multi_step(x, v, w, a=0.2, surrogate_function=surrogate.ATan(),
                                                              store_state_seq=True)[0]
                else:
                    call = functional.qif_multi_step if name == "qif" else functional.eif_multi_step
                    spikes = call(x, v, surrogate_function=surrogate.ATan())[0]
            with recorder.stage("backward"):
                spikes.backward(grad)
        return _stage_totals(tmp_path / device, skip=(WRAPPER,))

    assert run("meta") == run("cpu")


def _nonlinear_by_hand(tmp_path, config):
    return _stage_totals(_record(tmp_path / "meta", "meta", config), skip=(WRAPPER,))


def test_qif_counts_by_hand(tmp_path):
    # QIF (tau 2, hard reset -0.1, ATan), T = 4, E = 6: n = 24 element-steps, chained = 18
    got = _nonlinear_by_hand(tmp_path, "qif")
    n, chained = 24, 18
    # forward: charge (x + a0 (v - rest)(v - critical)) / tau + v: sub, mul, sub, mul, add, div,
    # add 7; fire sub, ge 2; reset mul, rsub, mul, add 4
    assert got["flop", "forward"] == 13 * n
    assert got["ac", "forward"] == 7 * n  # charge's 2 subs and 2 adds, fire's sub, reset's rsub and add
    # bytes: charge 8+8+8+12+12+8+12 = 68, fire 18, reset 40, stacks of spikes, h and the
    # previous v 24 = 150, + v_init's full_like 4 * 6
    assert got["memory_access", "forward"] == 150 * n + 4 * 6
    # backward: ATan 5 + its product 1 + x's div by tau 1 every step; step to step the reset's
    # 7 and the charge's 3 mul and 2 add on v's path
    assert got["flop", "backward"] == 7 * n + 12 * chained
    assert got["ac", "backward"] == 1 * n + 5 * chained
    # bytes: ATan 56, div 8, stack of x's gradients 8; reset 76, charge 12+12+8+12+12 = 56
    assert got["memory_access", "backward"] == 72 * n + 132 * chained


def test_eif_counts_by_hand(tmp_path):
    # EIF (tau 2, delta 1, theta 0.8, hard reset -0.1, ATan), T = 4, E = 6: n = 24, chained = 18
    got = _nonlinear_by_hand(tmp_path, "eif")
    n, chained = 24, 18
    # forward: charge v + (x + rest - v + delta exp((v - theta) / delta)) / tau: add, sub, sub,
    # div, exp, mul, add, div, add 9; fire 2; reset 4
    assert got["flop", "forward"] == 15 * n
    assert got["ac", "forward"] == 8 * n  # charge's add, sub, sub, add, add; fire 1; reset 2
    # bytes: charge 8+12+8+8+8+8+12+8+12 = 84, fire 18, reset 40, stacks 24; v_init's 24
    assert got["memory_access", "forward"] == 166 * n + 4 * 6
    # backward: every step 7 as QIF's; step to step the reset's 7 and the charge's mul (delta),
    # mul (exp's result), div (delta), neg (- v) and 2 adds
    assert got["flop", "backward"] == 7 * n + 13 * chained
    assert got["ac", "backward"] == 1 * n + 5 * chained
    assert got["memory_access", "backward"] == 72 * n + (76 + 60) * chained


def test_izhikevich_counts_by_hand(tmp_path):
    # Izhikevich (a 0.3, b 0.5, w_rest 0.1, hard reset 0, ATan), T = 4, E = 6: n = 24, chained
    # 18, and from the third step on (w_t taking gradient from three uses) 12
    got = _nonlinear_by_hand(tmp_path, "izhikevich")
    n, chained, twice = 24, 18, 12
    # forward: QIF's charge with `- w` 8; fire 2; recovery w + (a (h - rest) - w) / tau_w +
    # b * spike: sub, mul, sub, div, add, mul, add 7; reset 4
    assert got["flop", "forward"] == 21 * n
    assert got["ac", "forward"] == 12 * n  # charge 5, fire 1, recovery 4, reset 2
    # bytes: charge 80, fire 18, recovery 68, reset 40, stacks 24; full_like of v and w 2 * 24
    assert got["memory_access", "forward"] == 230 * n + 2 * 4 * 6
    # backward: every step 7; step to step the reset's 7, the charge's 5 on v's path and w's
    # neg, the recovery's mul (b), div (tau_w), mul (a) and the spike's and h's extra sums 5;
    # from the third step w's neg and its 2 sums
    assert got["flop", "backward"] == 7 * n + 18 * chained + 3 * twice
    assert got["ac", "backward"] == 1 * n + 7 * chained + 2 * twice
    assert got["memory_access", "backward"] == 72 * n + (76 + 64 + 48) * chained + 32 * twice


def test_izhikevich_defaults_leave_forward_ac_unknown_on_meta(tmp_path):
    # IzhikevichNode's defaults (a = b = 0, w_rest = 0): w stays 0 on CPU and the recovery's
    # three adds pair zeros (0 ACs, not 3 E per step). On meta w_init's values are not recorded:
    # the forward's AC is unknown (reported), never the dense guess; the rest is exact
    defaults = (neuron.IzhikevichNode, dict(surrogate_function=surrogate.ATan()), (4, 2, 3))
    meta = _record(tmp_path / "meta", "meta", defaults)
    cpu = _stage_totals(_record(tmp_path / "cpu", "cpu", defaults))
    with open_trace(meta) as trace:
        assert "sj_izhikevich.forward.default" in set(count(trace, ["ac"]).unsupported_of("ac"))
    fused = _stage_totals(meta, skip=(WRAPPER,))
    assert cpu["ac", "forward"] == (12 - 3) * 24
    assert fused.get(("ac", "forward"), 0) == 0
    assert {k: v for k, v in fused.items() if k != ("ac", "forward")} == \
        {k: v for k, v in cpu.items() if k != ("ac", "forward")}


# -- value-dependent ACs: the rule over the facts a CUDA trace records ---------------------------
# (a CPU run cannot record the op whole: its autograd kernel decomposes it, inference mode too)

def _rule_over_facts(rule, args, tensors):
    """A rule over the recorded facts (numel, bytes, nnz, is01) of `tensors` (slot -> tensor)."""
    con = duckdb.connect()
    for macro in MACROS:
        con.execute(macro)
    facts = {f"{slot}_{fact}": value for slot, t in tensors.items() for fact, value in (
        ("numel", t.numel()), ("bytes", 4 * t.numel()), ("nnz", int(t.count_nonzero())),
        ("is01", bool(((t == 0) | (t == 1)).all())))}
    row = ", ".join(f"{value!r} AS {name}" for name, value in facts.items())
    return con.execute(f"SELECT {rule} FROM (SELECT {row}, '{json.dumps(args)}' AS args)").fetchone()[0]


def _ac_of_fused_lif(x, v, decay_input):
    """sj_lif.forward's AC rule over x's and v_init's recorded facts (is01, nnz, numel)."""
    args = [{"$t": 0}, {"$t": 1}, 2.0, decay_input, 1.0, 0.0, False, 2.0, False, 1]
    return _rule_over_facts(sj_neurons.AC["sj_lif.forward.default"], args, {"a0": x, "a1": v})


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


@pytest.mark.parametrize("case", ["w_zero", "w_zero_b_no_spike", "w_zero_b_spikes", "w_ones", "a"])
def test_izhikevich_recovery_ac_follows_the_recorded_values(tmp_path, case):
    # with a = 0 the recovery's `0 * (h - rest) - w`, `w + (...) / tau_w` and `+ b * spike` add
    # tensors that follow w only: w_init all zero and b = 0 (or no spike) keeps w zero, binary
    # pairs CPU counts 0 each: 12 - 3 = 9 per element-step (T = 4, E = 6), not 12. Spikes with
    # b <> 0, or a w_init not zero, make it depend on values the op hides: unknown
    import spikingjelly._ops.izhikevich  # noqa: F401  registers torch.ops.sj_izhikevich

    torch.manual_seed(0)
    x = -torch.rand(4, 2, 3) if case == "w_zero_b_no_spike" else torch.randn(4, 2, 3)
    v, w = torch.zeros(2, 3), torch.ones(2, 3) if case == "w_ones" else torch.zeros(2, 3)
    a, b = 0.3 if case == "a" else 0.0, 0.5 if case.startswith("w_zero_b") or case == "a" else 0.0
    params = [2.0, 0.0, 0.8, 1.0, a, b, 2.0, 1.0, 0.0, False, 2.0, False, 1]
    with Recorder(tmp_path / "steps") as recorder, recorder.stage("forward"), torch.no_grad():
        spikes = torch.ops.sj_izhikevich.forward(x, v, w, *params)[0]
    with open_trace(tmp_path / "steps") as trace:
        frame = count(trace, ["ac"]).frame
    decomposed = int(frame[frame.scope == "Global"]["value"].sum())
    rule = sj_neurons.AC["sj_izhikevich.forward.default"]
    fused = _rule_over_facts(rule, [{"$t": 0}, {"$t": 1}, {"$t": 2}, *params],
                             {"a0": x, "a1": v, "a2": w, "o0": spikes})
    if case in ("w_zero_b_spikes", "w_ones"):
        assert fused is None
    else:
        assert fused == decomposed == (12 if case == "a" else 9) * 24
