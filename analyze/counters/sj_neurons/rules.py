"""SpikingJelly 2.0.0's fused neuron ops (`sj_if`, `sj_lif`, `sj_plif`; `sj_qif`, `sj_eif`,
`sj_izhikevich` in costs.py, with the cost tables all share): FLOP, byte and AC rules
equal to what the counters give the same call on CPU (tests/test_sj_neuron_ops.py records both).

On CUDA (and meta) a multi-step IFNode/LIFNode call is one registered op,
`sj_<neuron>.forward(x_seq, v_init, <parameters>) -> (spikes, v, h_seq)`, and its gradient one
`sj_<neuron>.backward(grad_spikes, grad_v, h_seq, <parameters>) -> (grad_x, grad_v_init)`.
ParametricLIFNode's is `sj_plif.forward(x_seq, v_init, w, ...)`, its gradient
`sj_plif.backward(grad_spikes, grad_v, x_seq, v_init, w, h_seq, ...) -> (.., grad_w)`.
On CPU SpikingJelly's AutogradCPU kernel runs the same call as per-step aten ops
(spikingjelly/_ops/<neuron>/reference.py, reset.py, surrogate.py), and autograd differentiates
them; those are what SpikingJelly's own counters see. Each rule here is that decomposition's
count, per element of one step (E = numel(v_init)) times the steps, a sum of the terms below.

Forward, per element per step (exact: the decomposition's ops do not depend on values, their
counts only on the arguments). Bytes are `k + j * s`, s the element size of x (spikes are
x's dtype, the state and h float32):
* charge, LIF `h = v + (x - (v - v_reset)) / tau` (decay_input) or `v - (v - v_reset) / tau + x`:
  sub, sub, div, add; IF `h = v + x`: add. (v_reset None subtracts 0.0 all the same.)
* fire `(h - threshold >= 0).to(float32)`: sub, ge, a bool->float copy; and for an x that is not
  float32 the spike's cast to x's dtype.
* reset, hard `spike * v_reset + (1 - spike) * h`: mul, rsub, mul, add; soft `h - spike *
  threshold`: mul, sub. detach_reset only detaches (no op).
* outputs: the stacks of spikes and h (and of v when store_v_seq).

Backward: on CPU there is no backward op; autograd runs the derivative of each forward op, so
its count is that of SpikingJelly's CPU training step, which the rule reproduces for the
module's call: x_seq needing grad, v_init not (a fresh or detached state) and no gradient into
the final v (SpikingJelly keeps it as state). Per element, some terms run every step, the
ones carrying the gradient from step t to step t-1 run T-1 times:
* every step: the surrogate's gradient and its product with the spike's gradient; LIF with
  decay_input the div by tau on x's path; the stack of x's gradients;
* from step to step: the reset's derivative (none through the spike with detach_reset) and
  the charge's on v's path, with the sums where two paths meet.
The fused op differs from that in two ways the rule does not follow: it runs every step's
full recurrence (grad_v_init included, and grad_v materialised as zeros by SpikingJelly's
wrapper, a `zeros_like` recorded apart), and it fuses the arithmetic into one pass
(docs/deviations.md, "SpikingJelly's fused neuron ops").

ACs depend on values: CPU counts an add of two binary tensors as nnz(a) + nnz(b), not numel.
The decomposition's two-tensor adds have a binary pair only for a binary input current x (or
binary incoming gradient in backward), e.g. IF's first `v_init + x` with v_init zeros; their
intermediate values are not in the trace. So: a known binary x_seq (grad_spikes) leaves the
AC unknown (NULL, reported), any other (values unknown on meta included) gets the dense count,
which CPU gives for a float input current such as a synaptic layer's output.

PLIF is LIF with `* q`, q = sigmoid(w) (w a 0-dim tensor), where LIF divides by tau: the same
per-element terms, plus q's bytes in each step's product (4 B), the sigmoid once, x's per-step
`x.float()` (a copy when x is not float32), and in backward w's gradient when w requires grad:
every step `grad * (x - (v - v_reset))` (or `-(v - v_reset)`) summed to a scalar, the steps'
T - 1 scalar adds, sigmoid's derivative; without decay_input the first step's `-grad` too
(`(v_init - v_reset) * q` needs grad through q). A w that does not require grad (frozen)
skips those; one whose requires_grad the trace lacks is taken as trained.

Surrogates (surrogate_id, SpikingJelly's _SURROGATE_IDS) whose gradient takes `abs`
(PiecewiseQuadratic, PiecewiseExp, SoftSign, SuperSpike) have no FLOP or byte rule, as `abs`
and `clamp_min` have none on CPU: those counts are unknown; their ACs are known.

No rule (reported as unknown): `sj_ilif` (its CPU kernel's clamp, round and bitwise_and have no
FLOP or byte rule, and its ACs add its STE window, whose nnz the op hides), and the inference
ops `sj_activation_aware_if` and `sj_stbif`, whose CPU kernel is registered below autograd and
so is recorded whole on CPU too: no decomposition to count them as.
"""

from __future__ import annotations

from spiketrace.analyze.counters.sj_neurons import costs
from spiketrace.analyze.counters.sj_neurons.costs import ZERO, Cost, Term, when
from spiketrace.analyze.counters.sql import arg

# Argument positions of each op's parameters and of the tensors the rules read: x (its dtype
# gives the spikes' and gradients' bytes) and the stacked h_seq of backward ([T, ...]).
# sj_if.forward(x, v, threshold, reset, detach_reset, alpha, store_v_seq=True, surrogate_id=0)
# sj_lif.forward(x, v, tau, decay_input, threshold, reset, detach_reset, alpha, store_v_seq,
#                surrogate_id); backward: (grad_spikes, grad_v, h, <the same parameters>)
# sj_plif.forward(x, v, w, <sj_lif's from decay_input on>); backward: (grad_spikes, grad_v, x,
#                 v, w, h, <the same>)
LAYOUTS = {
    "sj_if.forward.default": {"reset": 3, "detach_reset": 4, "store_v_seq": 6},
    "sj_if.backward.default": {"reset": 4, "detach_reset": 5, "surrogate_id": 8, "h": 2},
    "sj_lif.forward.default": {"decay_input": 3, "reset": 5, "detach_reset": 6, "store_v_seq": 8},
    "sj_lif.backward.default": {"decay_input": 4, "reset": 6, "detach_reset": 7, "surrogate_id": 10, "h": 2},
    "sj_plif.forward.default": {"decay_input": 3, "reset": 5, "detach_reset": 6, "store_v_seq": 8, "w": 2},
    "sj_plif.backward.default": {"decay_input": 6, "reset": 8, "detach_reset": 9, "surrogate_id": 12, "h": 5,
                                 "w": 4},
}

# -- forward (reference._forward_impl) ------------------------------------------------------
# LIF's charge, either form: sub 8 B + (x - a or + x) 8 + s + div 8 + add or sub 12; ACs the
# sub, sub and add. IF's: add 8 + s.
CHARGE = {"sj_if": Cost(1, 1, 8, 1), "sj_lif": Cost(4, 3, 36, 1), "sj_plif": Cost(4, 3, 40)}
# PLIF: `x.float()` each step (X_FLOAT: a copy, 4 + s, when x is not float32; its sub then
# reads 4 B), q's 4 B in each step's product, and q = w.float().sigmoid() once (w's copy when w
# is not float32: its element size + 4).
Q_READ = Cost(0, 0, 4)
SIGMOID_OF_W = Cost(4, 0, 8)  # flop.py's sigmoid: 4 per element
W_FLOAT = Cost(0, 0, 4, 1)
# -- backward (autograd of the forward above; float32) ----------------------------------------
GRAD_X = Cost(0, 0, 0, 2)        # stack of the steps' x gradients (UnbindBackward), x's dtype
# LIF with decay_input: x's gradient divided by tau (DIV_GRAD; PLIF: * q)
# PLIF's gradient of w: every element-step `grad * factor` (12 B) and the read of its sum
# (4 B), the sums' E - 1 adds per step (their 4 B result per step: Q_READ), the T - 1 adds of
# the steps' scalars (12 B each), sigmoid_backward (12 B) and, w not float32, the cast back.
W_GRAD_PRODUCT = Cost(1, 0, 16)
W_GRAD_SUM = Cost(1, 1, 0)
W_GRAD_STEPS = Cost(1, 1, 12)
SIGMOID_BACKWARD = Cost(1, 0, 12)
FIRST_STEP_NEG = Cost(1, 0, 8)  # PLIF without decay_input: -grad of (v_init - v_reset) * q
# From step t to t-1, the charge's derivative on v's path: LIF with decay_input neg (of
# x - a), add (v's two uses); without: neg, div, add; IF's h = v + x passes it on.
CHARGE_CHAIN = {"sj_if": ZERO, "sj_lif_decay": Cost(2, 1, 20), "sj_lif": Cost(3, 1, 28)}
# ... and the reset's (RESET_CHAIN, costs.py).


def _flag(op: str, name: str) -> str:
    return costs.flag(LAYOUTS[op][name])


def _forward_terms(op: str) -> list[Term]:
    """The forward's terms; x = a0 ([T, ...]): T * E = a0_numel element-steps."""
    neuron = op.split(".")[0]
    n, x = "a0_numel", "a0_bytes"
    terms: list[Term] = [
        ([("true", CHARGE[neuron])], n, x),
        ([("true", costs.FIRE)], n, x),
        (when(costs.X_NOT_FLOAT32, costs.SPIKE_CAST), n, x),
        (costs.reset_cases(costs.RESET, LAYOUTS[op]['reset']), n, x),
        ([("true", costs.OUTPUTS)], n, x),
        (when(_flag(op, "store_v_seq"), costs.V_SEQ), n, x),
    ]
    if neuron == "sj_plif":
        w = f"a{LAYOUTS[op]['w']}"
        terms += [
            (when(costs.X_NOT_FLOAT32, costs.X_FLOAT), n, x),
            ([("true", Q_READ)], "a0_shape[1]", x),
            ([("true", SIGMOID_OF_W)], "1", x),
            (when(f"{w}_bytes <> 4", W_FLOAT), "1", f"{w}_bytes"),
        ]
    return terms


def _backward_terms(op: str) -> list[Term]:
    """The backward's terms; h ([T, ...]): every step T * E elements, from step to step
    (T - 1) * E."""
    neuron = op.split(".")[0]
    x = "a0_bytes"
    every, steps, chained = costs.backward_extent(f"a{LAYOUTS[op]['h']}")
    terms: list[Term] = [
        (costs.surrogate_cases(LAYOUTS[op]["surrogate_id"]), every, x),
        ([("true", GRAD_X)], every, x),
        (when(costs.X_NOT_FLOAT32, costs.GRAD_CAST), every, x),
        (costs.reset_cases(costs.RESET_CHAIN, LAYOUTS[op]['reset'], LAYOUTS[op]['detach_reset']), chained, x),
    ]
    if neuron == "sj_if":
        return terms
    decay = _flag(op, "decay_input")
    terms += [
        (when(decay, costs.DIV_GRAD), every, x),
        ([(decay, CHARGE_CHAIN["sj_lif_decay"]), ("true", CHARGE_CHAIN["sj_lif"])], chained, x),
    ]
    if neuron == "sj_plif":
        w = f"a{LAYOUTS[op]['w']}"
        trained = f"coalesce({w}_requires_grad, true)"
        terms += [
            # q's read in x's product (decay_input) or in v's, from step to step (without)
            ([(decay, Q_READ), ("true", ZERO)], steps, x),
            ([(decay, ZERO), ("true", Q_READ)], f"({steps} - 1)", x),
            (when(trained, W_GRAD_PRODUCT), every, x),
            (when(trained, W_GRAD_SUM), f"({every} - {steps})", x),
            (when(trained, Q_READ), steps, x),
            (when(trained, W_GRAD_STEPS), f"({steps} - 1)", x),
            (when(trained, SIGMOID_BACKWARD), "1", x),
            (when(f"{trained} AND {w}_bytes <> 4", W_FLOAT), "1", f"{w}_bytes"),
            (when(f"{trained} AND NOT {decay}", FIRST_STEP_NEG), f"({every} // {steps})", x),
        ]
    return terms


# LIF without decay_input, first step: `v_init - (v_init - v_reset) / tau` subtracts two tensors
# that are binary when v_init is all 0 and the reset value (0.0 for soft reset) is 0: CPU counts
# nnz + nnz = 0 there, not E. (Or v_init all 1 with v_reset = 1 - tau: 2E.) SpikingJelly's fresh
# state is v_init filled with the reset value, so where v_init's values are unknown (meta) a
# zero reset value gives 0. Every other two-tensor add pairs an operand that follows x's values.
_RESET_VALUE = f"coalesce({arg(5, 'DOUBLE')}, 0)"
_FIRST_STEP_SUB = (
    f"(CASE WHEN coalesce(a1_is01, true) AND coalesce(a1_nnz, 0) = 0 AND {_RESET_VALUE} = 0 THEN 0"
    f" WHEN a1_is01 AND a1_nnz = a1_numel AND {_RESET_VALUE} = 1 - {arg(2, 'DOUBLE')} THEN 2 * a1_numel"
    " ELSE a1_numel END)"
)
# PLIF's `(v_init - v_reset) * q`, q = sigmoid(w) in (0, 1) and w's value not recorded: binary
# with a zero v_init and reset value, dense otherwise, except that with a negative reset value
# a binary v_init could make it 1 (unknown). (q rounds to 1.0 in float32 only for w > 16.6.)
_PLIF_FIRST_STEP_SUB = (
    f"(CASE WHEN coalesce(a1_is01, true) AND coalesce(a1_nnz, 0) = 0 AND {_RESET_VALUE} = 0 THEN 0"
    f" WHEN coalesce(a1_is01, true) AND {_RESET_VALUE} < 0 THEN NULL ELSE a1_numel END)"
)
AC_ADJUSTMENT = {
    op: f"CASE WHEN {_flag(op, 'decay_input')} THEN 0 ELSE {first_step} - a1_numel END"
    for op, first_step in (("sj_lif.forward.default", _FIRST_STEP_SUB),
                           ("sj_plif.forward.default", _PLIF_FIRST_STEP_SUB))
}


def _rule(op: str, field: str) -> str:
    if op in costs.LAYOUTS:
        terms, adjustment = costs.terms(op), costs.AC_ADJUSTMENT.get(op)
    else:
        forward = op.split(".")[1] == "forward"
        terms, adjustment = _forward_terms(op) if forward else _backward_terms(op), AC_ADJUSTMENT.get(op)
    rule = costs.total(terms, field)
    if field != "ac":
        return rule
    if adjustment is not None:
        rule = f"({rule} + {adjustment})"
    # a binary x_seq (grad_spikes) makes some adds nnz(a) + nnz(b) on CPU: unknown here
    return f"CASE WHEN coalesce(a0_is01, false) THEN NULL ELSE {rule} END"


OPS = (*LAYOUTS, *costs.LAYOUTS)
FLOP: dict[str, str] = {op: _rule(op, "flop") for op in OPS}
BYTES: dict[str, str] = {op: _rule(op, "bytes") for op in OPS}
AC: dict[str, str] = {op: _rule(op, "ac") for op in OPS}
