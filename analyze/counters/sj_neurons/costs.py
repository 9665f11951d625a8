"""Per element-step cost tables of SpikingJelly 2.0.0's fused neuron ops, the SQL that sums
them, and the rules of its nonlinear neurons: `sj_qif` (QIFNode), `sj_eif` (EIFNode) and
`sj_izhikevich` (IzhikevichNode). rules.py has IF/LIF/PLIF's rules, the conventions
all of them follow (what counts per step, from step to step, which ACs are unknown) and the
interface (FLOP, BYTES, AC).

The nonlinear neurons' CPU kernel (AutogradCPU, spikingjelly/_ops/<neuron>/reference.py) is
LIF's loop with another charge; besides the spikes it returns the stacks of h and of the
previous voltages (`previous`, v_init first) and the final state (stacked per step with
store_v_seq). `x.float()` converts x once for all steps (a copy when x is not float32),
so its gradient is stacked in float32 and cast back once. Per element-step (E = numel(v_init)):
* QIF `h = v + (x + a0 * (v - rest) * (v - critical)) / tau`: sub, mul, sub, mul, add, div, add;
* EIF `h = v + (x + rest - v + delta * exp((v - theta) / delta)) / tau`: add, sub, sub, div,
  exp, mul, add, div, add;
* Izhikevich `h = v + (x + a0 * (v - rest) * (v - critical) - w) / tau` (QIF's with `- w`),
  and its recovery `w' = w + (a * (h - rest) - w) / tau_w + b * spike`: sub, mul, sub, div, add,
  mul, add (stacked per step with store_v_seq, as v is).
Fire and reset are IF/LIF's. Backward, autograd of that: every step the surrogate, x's
`/ tau` (the charge's only op on x's path); from step to step the reset's derivative and the
charge's on v's path (QIF, Izhikevich: (v - rest) and (v - critical)'s products, a0's, and
v's three uses summed; EIF: exp's, delta's and `- v`'s, three uses summed). Izhikevich's w
carries the gradient too: from step to step the charge's `- w` (neg), the
recovery's `* b` (to the spike), `/ tau_w` and `* a` (to h), and one more sum each for the
spike and h; from the third step on w_t itself takes gradient from three uses (the charge,
w' directly, w' through `- w`): a neg and two sums, (T - 2) * E times.

ACs: every two-tensor add has an operand that follows x (a known binary x: unknown, as for
LIF), except Izhikevich's recovery with `a = 0`: `0 * (h - rest) - w`, `w + (...) / tau_w` and
`... + b * spike` then add tensors that follow w only. With w_init all zero (recorded) and
b = 0 (or no spike at all) w stays zero and those three adds are binary pairs of zeros: CPU
counts 0, not E, each step. With a = 0 otherwise (w_init's values not recorded, as on meta, or
not zero; spikes with b <> 0) they depend on values the op hides: unknown (NULL).
"""

from __future__ import annotations

from typing import NamedTuple

from spiketrace.analyze.counters.sql import arg, arg_is_null


class Cost(NamedTuple):
    """Per element per step: FLOPs, ACs (dense), and bytes = k + j * (element size of x); None
    where unknown (NULL)."""
    flop: int | None
    ac: int | None
    k: int | None
    j: int = 0


ZERO = Cost(0, 0, 0)
Term = tuple[list[tuple[str, Cost]], str, str]  # (condition, cost) cases, elements, x's bytes


def pick(cases: list[tuple[str, Cost]], field: str, elements: str, x_bytes: str) -> str:
    """CASE over (condition, cost): the cost's `field` per element per step, times `elements`
    (bytes: plus j times `x_bytes`)."""
    def value(cost: Cost) -> str:
        amount = cost.k if field == "bytes" else getattr(cost, field)
        if amount is None:
            return "NULL"
        parts = [f"{amount} * {elements}"] if amount else []
        if field == "bytes" and cost.j:
            parts.append(f"{cost.j} * {x_bytes}")
        return f"({' + '.join(parts)})" if parts else "0"
    values = [value(cost) for _, cost in cases]
    if len(set(values)) == 1:
        return values[0]
    return "(CASE " + " ".join(f"WHEN {c} THEN {v}" for (c, _), v in zip(cases, values)) + " END)"


def total(terms: list[Term], field: str) -> str:
    """The sum of the terms' `field`."""
    picked = [pick(cases, field, elements, x_bytes) for cases, elements, x_bytes in terms]
    return "(" + " + ".join(p for p in picked if p != "0") + ")"


def flag(index: int) -> str:
    """A boolean argument; unknown reads as true."""
    return f"coalesce({arg(index, 'BOOLEAN')}, true)"


def hard(reset_index: int) -> str:
    return f"NOT {arg_is_null(reset_index)}"


# x (a0) is not float32: its spikes and gradients are cast to and from x's dtype
X_NOT_FLOAT32 = "a0_bytes <> 4 * a0_numel"


def backward_extent(h: str) -> tuple[str, str, str]:
    """(every, steps, chained) of a backward whose stacked h_seq ([T, ...]) is slot `h`: T * E
    element-steps, T, and the (T - 1) * E that carry a gradient from one step to the one before."""
    every, steps = f"{h}_numel", f"{h}_shape[1]"
    return every, steps, f"({every} - {every} // {steps})"


def when(condition: str, cost: Cost) -> list[tuple[str, Cost]]:
    return [(condition, cost), ("true", ZERO)]


def reset_cases(table: dict, reset_index: int, detach_index: int | None = None) -> list[tuple[str, Cost]]:
    """hard | soft (table["hard"|"soft"]), or with detach_index (table[("hard"|"soft", detached)])."""
    if detach_index is None:
        return [(hard(reset_index), table["hard"]), ("true", table["soft"])]
    det = flag(detach_index)
    return [(f"{hard(reset_index)} AND {det}", table[("hard", True)]), (hard(reset_index), table[("hard", False)]),
            (det, table[("soft", True)]), ("true", table[("soft", False)])]


# -- forward, shared (reference._forward_impl; bytes as k + j * s, s the element size of x) ----
FIRE = Cost(2, 1, 18)        # (h - threshold >= 0).to(float32): sub 8 B, ge 4 + 1 (bool), _to_copy 1 + 4
SPIKE_CAST = Cost(0, 0, 4, 1)  # x not float32: spike.to(x.dtype)
RESET = {"hard": Cost(4, 2, 40), "soft": Cost(2, 1, 20)}  # mul 8, rsub 8, mul 12, add 12 | mul 8, sub 12
OUTPUTS = Cost(0, 0, 8, 2)   # stack(spikes) reads and writes x's dtype, stack(h) float32
V_SEQ = Cost(0, 0, 8)        # a float32 stack: v with store_v_seq, the nonlinear neurons' previous v
X_FLOAT = Cost(0, 0, 4, 1)   # x not float32: x.float() (4 + s; the charge then reads 4 B)

# -- backward, shared (autograd of the forward above; float32) ---------------------------------
# The surrogate's gradient (surrogate.py _surrogate_gradient) times the spike's gradient (mul 12 B).
# 0 Sigmoid: mul, sigmoid (4), rsub, mul, mul; 1 ATan: mul, mul, add (the AC), reciprocal, mul;
# 6 Erf: mul, neg, mul, exp, mul. ACs 2 rsub, 3 none, 4 and 5 one add (their FLOPs and bytes:
# abs has no rule).
SURROGATE = {
    0: Cost(9, 1, 56), 1: Cost(6, 1, 56), 2: Cost(None, 1, None), 3: Cost(None, 0, None),
    4: Cost(None, 1, None), 5: Cost(None, 1, None), 6: Cost(6, 0, 56),
}
GRAD_CAST = Cost(0, 0, 8, 2)     # x not float32: the spike's gradient to float32, x's back (4 + s each)
DIV_GRAD = Cost(1, 0, 8)         # a gradient divided by tau (LIF's decay_input, the nonlinear charges)
# From step t to t-1, the reset's derivative (hard|soft, detach_reset). hard: grad via spike *
# v_reset (mul 8), 1 - spike (neg 8), (1 - spike) * h (mul 12 twice), sums for the spike (2
# adds) and h (add); detached: only (1 - spike) * h's h path and h's sum. soft: -g (neg),
# * threshold (mul), the spike's and h's sums; detached: h's sum.
RESET_CHAIN = {
    ("hard", False): Cost(7, 3, 76), ("hard", True): Cost(2, 1, 24),
    ("soft", False): Cost(4, 2, 40), ("soft", True): Cost(1, 1, 12),
}


def surrogate_cases(surrogate_index: int) -> list[tuple[str, Cost]]:
    surrogate = f"coalesce({arg(surrogate_index)}, 0)"
    return [(f"{surrogate} = {i}", cost) for i, cost in SURROGATE.items()] + [("true", Cost(None, None, None))]


# -- the nonlinear neurons ---------------------------------------------------------------------
# sj_qif.forward(x, v, tau, rest, critical, a0, threshold, reset, detach_reset, alpha, store_v_seq,
#   surrogate_id) -> (spikes, v, h, previous); backward(grad_spikes, grad_v, h, previous, <the same>)
# sj_eif: the same with (tau, rest, theta, delta) for (tau, rest, critical, a0)
# sj_izhikevich.forward(x, v, w, tau, rest, critical, a0, a, b, tau_w, threshold, reset, detach_reset,
#   alpha, store_v_seq, surrogate_id) -> (spikes, v, w, h, previous); backward(grad_spikes,
#   grad_v, grad_w, h, previous, <the same>)
_QIF_FORWARD = {"reset": 7, "detach_reset": 8, "store_v_seq": 10}
_QIF_BACKWARD = {"reset": 9, "detach_reset": 10, "surrogate_id": 13, "h": 2}
LAYOUTS = {
    "sj_qif.forward.default": _QIF_FORWARD, "sj_qif.backward.default": _QIF_BACKWARD,
    "sj_eif.forward.default": _QIF_FORWARD, "sj_eif.backward.default": _QIF_BACKWARD,
    "sj_izhikevich.forward.default": {"reset": 11, "detach_reset": 12, "store_v_seq": 14, "w": 2, "a": 7, "b": 8},
    "sj_izhikevich.backward.default": {"reset": 13, "detach_reset": 14, "surrogate_id": 17, "h": 3},
}
# The charges: QIF sub 8 B, mul 8, sub 8, mul 12, add 12, div 8, add 12 (ACs the subs and
# adds); EIF add 8, sub 12, sub 8, div 8, exp 8, mul 8, add 12, div 8, add 12; Izhikevich
# QIF's and sub 12 (`- w`).
CHARGE = {"sj_qif": Cost(7, 4, 68), "sj_eif": Cost(9, 5, 84), "sj_izhikevich": Cost(8, 5, 80)}
RECOVERY = Cost(7, 4, 68)    # sub 8, mul 8, sub 12, div 8, add 12, mul 8, add 12
# The charge's derivative on v's path, from step to step: QIF mul 12, mul 12, mul (a0) 8 and
# two sums; EIF mul (delta) 8, mul (exp's result) 12, div 8, neg 8, two sums; Izhikevich
# QIF's and w's neg (8).
CHARGE_CHAIN = {"sj_qif": Cost(5, 2, 56), "sj_eif": Cost(6, 2, 60), "sj_izhikevich": Cost(6, 2, 64)}
RECOVERY_CHAIN = Cost(5, 2, 48)  # mul (b) 8, div (tau_w) 8, mul (a) 8, the spike's and h's sums
W_CHAIN = Cost(3, 2, 32)         # from the third step: w's neg (8) and its two sums
GRAD_X_FLOAT = Cost(0, 0, 8)     # stack of x's float32 gradients (then GRAD_CAST's cast back)


def _forward_terms(op: str) -> list[Term]:
    layout, neuron = LAYOUTS[op], op.split(".")[0]
    n, x = "a0_numel", "a0_bytes"
    terms: list[Term] = [
        ([("true", CHARGE[neuron])], n, x),
        (when(X_NOT_FLOAT32, X_FLOAT), n, x),
        ([("true", FIRE)], n, x),
        (when(X_NOT_FLOAT32, SPIKE_CAST), n, x),
        (reset_cases(RESET, layout["reset"]), n, x),
        ([("true", OUTPUTS)], n, x),
        ([("true", V_SEQ)], n, x),  # previous
        (when(flag(layout["store_v_seq"]), V_SEQ), n, x),
    ]
    if neuron == "sj_izhikevich":
        terms += [([("true", RECOVERY)], n, x), (when(flag(layout["store_v_seq"]), V_SEQ), n, x)]
    return terms


def _backward_terms(op: str) -> list[Term]:
    layout, neuron = LAYOUTS[op], op.split(".")[0]
    x = "a0_bytes"
    every, steps, chained = backward_extent(f"a{layout['h']}")
    terms: list[Term] = [
        (surrogate_cases(layout["surrogate_id"]), every, x),
        ([("true", DIV_GRAD)], every, x),
        ([("true", GRAD_X_FLOAT)], every, x),
        (when(X_NOT_FLOAT32, GRAD_CAST), every, x),
        (reset_cases(RESET_CHAIN, layout["reset"], layout["detach_reset"]), chained, x),
        ([("true", CHARGE_CHAIN[neuron])], chained, x),
    ]
    if neuron == "sj_izhikevich":
        twice_chained = f"greatest({every} - 2 * ({every} // {steps}), 0)"
        terms += [([("true", RECOVERY_CHAIN)], chained, x), ([("true", W_CHAIN)], twice_chained, x)]
    return terms


def terms(op: str) -> list[Term]:
    return _forward_terms(op) if op.split(".")[1] == "forward" else _backward_terms(op)


# Izhikevich's recovery with a = 0 (module docstring): its three adds are 0 when w_init is all
# zero and b = 0 or there is no spike (o0, the spikes, all zero); unknown otherwise.
_IZH = LAYOUTS["sj_izhikevich.forward.default"]
_W_ZERO = f"a{_IZH['w']}_is01 AND a{_IZH['w']}_nnz = 0"
AC_ADJUSTMENT = {
    "sj_izhikevich.forward.default": (
        f"CASE WHEN {arg(_IZH['a'], 'DOUBLE')} <> 0 THEN 0 WHEN {arg(_IZH['a'], 'DOUBLE')} = 0 AND {_W_ZERO}"
        f" AND ({arg(_IZH['b'], 'DOUBLE')} = 0 OR o0_nnz = 0) THEN -3 * a0_numel END"
    ),
}
