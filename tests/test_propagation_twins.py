"""The propagation rules in their two implementations, run on the same operands: the Python rules
(capture/tensors/propagation.py) and the ones the compiled record applies itself
(capture/native/record/inherit.c and rules.c, through the extension's `propagate`, which runs
the code the record runs for an op's output).

Each case is an op as the dispatch mode sees it (its arguments, a Python number as the second
operand, keyword arguments), on tensors of every dtype holding the values a careless rule gets
wrong: NaN, both infinities, -0.0, values that round to 0 or to 1 in float16 or bfloat16, an
integer's extremes, bools; scalars that do the same; broadcasting and promotion. Where a rule
claims to know the output's (nnz, is01), it must be what the output itself holds
(count_nonzero, all 0 or 1); and the twins decide alike: the compiled rule gives what the
Python rule gives, or leaves the decision to it ("python": the record sends a large output to
the Python path). The same cases are then captured through each record, whose tensors rows
must hold the same truth.
"""

from __future__ import annotations

import math

import pytest
import torch

import spiketrace.capture.native
from spiketrace.analyze import open_trace
from spiketrace.capture import Recorder
from spiketrace.capture.ops.native_record import compiled_propagation
from spiketrace.capture.session.fast_paths import ENVIRONMENT_VARIABLE
from spiketrace.capture.tensors.propagation import PROPAGATION

_native = spiketrace.capture.native._native
pytestmark = pytest.mark.skipif(_native is None, reason="the extension is not built")
aten = torch.ops.aten

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.bool, torch.uint8, torch.int8,
          torch.int32, torch.int64]
# 0, 1 and the identities in every spelling; numbers that round to 0 (2**-30 in float16, 1e-41 in
# bfloat16, 1e-300 everywhere but float64) or to 1 (1.0000001) when the product is rounded;
# 65504 (float16's largest) and 1e5 (past it); the non-finite; a bool (not a number to the rules)
SCALARS = [0, 0.0, -0.0, 1, 1.0, 2, 2.5, -1.0, 2**-30, 1e-41, 1e-300, 1.0000001, 65504.0, 1e5, math.inf, -math.inf,
           math.nan, True]


# Operands of 320 elements, and outputs as large: the Python record applies a rule to an output
# of more than SMALL_TENSOR (256) elements only (a smaller one's scan costs what the rule does).
SHAPE = (4, 80)


def truth(t: torch.Tensor) -> tuple[int, bool]:
    return int(torch.count_nonzero(t)), bool(((t == 0) | (t == 1)).all())


def _operands(dtype: torch.dtype) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    binary = (torch.rand(*SHAPE, generator=g) < 0.3).to(dtype)
    found = {"binary": binary, "zeros": torch.zeros(SHAPE, dtype=dtype), "ones": torch.ones(SHAPE, dtype=dtype),
             "binary row": binary[:1]}
    if dtype.is_floating_point:
        odd = torch.randn(*SHAPE, generator=g).to(dtype)
        odd.view(-1)[:10] = torch.tensor([math.nan, math.inf, -math.inf, -0.0, 0.0, 1.0, 2**-30, 1e-41, 65519.0,
                                          1 - 2**-12], dtype=torch.float64).to(dtype)
        found.update({"odd": odd, "minus zeros": torch.full(SHAPE, -0.0, dtype=dtype)})
    elif dtype is not torch.bool:
        odd = binary.clone()
        info = torch.iinfo(dtype)
        odd.view(-1)[:4] = torch.tensor([info.max, info.min, 2, 1]).to(dtype)
        found["odd"] = odd
    if dtype.is_signed:  # their negation holds only 0 and 1
        found.update({"minus ones": -torch.ones(SHAPE, dtype=dtype), "minus binary": -binary})
    return found


def _case(op, args, kwargs=None, unknown=()):
    """(op, args, kwargs, known): known maps each tensor operand to its truth, or None for the
    operands in `unknown` (statistics not taken)."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    tensors += [t for a in args if isinstance(a, (list, tuple)) for t in a if isinstance(t, torch.Tensor)]
    known = {id(t): None if any(t is u for u in unknown) else truth(t) for t in tensors}
    return op, args, kwargs or {}, known


def _arithmetic_cases():
    for dtype in DTYPES:
        operands = _operands(dtype)
        for x_name, x in operands.items():
            for op in ("add", "sub", "mul", "div"):
                overload = getattr(aten, op).Tensor
                for c in SCALARS:
                    yield f"{op} {dtype} {x_name} {c!r}", _case(overload, (x, c))
                others = {"zeros": torch.zeros_like(x), "zeros f64": torch.zeros(x.shape, dtype=torch.float64),
                          "zeros row": torch.zeros(1, SHAPE[1], dtype=dtype),
                          "zeros column": torch.zeros(SHAPE[0], 1, dtype=dtype),
                          "zeros 0-dim": torch.zeros((), dtype=dtype), "zeros alike": torch.zeros(SHAPE, dtype=dtype),
                          "itself": x}
                for y_name, y in others.items():
                    yield f"{op} {dtype} {x_name} tensor {y_name}", _case(overload, (x, y))
                    yield f"{op} {dtype} tensor {y_name} {x_name}", _case(overload, (y, x))
                yield f"{op} {dtype} {x_name} zeros unknown", _case(overload, (x, others["zeros"]), unknown=[x])
                yield f"{op} {dtype} {x_name} unknown 1.0", _case(overload, (x, 1.0), unknown=[x])
            for alpha in (1, 1.0, 2, -1, True):
                for op in ("add", "sub"):
                    overload = getattr(aten, op).Tensor
                    yield f"{op} {dtype} {x_name} 0 alpha {alpha!r}", _case(overload, (x, 0), {"alpha": alpha})
                    yield (f"{op} {dtype} {x_name} zeros alpha {alpha!r}",
                           _case(overload, (x, torch.zeros_like(x)), {"alpha": alpha}))
            for c in (1, 1.0, 2, 0, True, math.nan):
                yield f"rsub {dtype} {x_name} {c!r}", _case(aten.rsub.Scalar, (x, c))
                yield f"rsub {dtype} {x_name} {c!r} alpha 2", _case(aten.rsub.Scalar, (x, c, 2))
            yield f"rsub {dtype} {x_name} 1 unknown", _case(aten.rsub.Scalar, (x, 1), unknown=[x])


def _element_cases():
    for dtype in DTYPES:
        operands = _operands(dtype)
        for x_name, x in operands.items():
            yield f"view {dtype} {x_name}", _case(aten.view.default, (x, [-1]))
            yield f"t {dtype} {x_name}", _case(aten.t.default, (x,))
            yield f"clone {dtype} {x_name}", _case(aten.clone.default, (x,))
            yield f"alias {dtype} {x_name}", _case(aten.alias.default, (x,))
            yield f"unsqueeze {dtype} {x_name}", _case(aten.unsqueeze.default, (x, 0))
            yield f"expand {dtype} {x_name}", _case(aten.expand.default, (x[:1], [5, SHAPE[1]]))
            yield f"expand {dtype} {x_name} empty", _case(aten.expand.default, (x[:1, :0], [5, 0]))
            yield f"view {dtype} {x_name} unknown", _case(aten.view.default, (x, [-1]), unknown=[x])
            if dtype is not torch.bool:
                yield f"neg {dtype} {x_name}", _case(aten.neg.default, (x,))
                yield f"neg {dtype} {x_name} unknown", _case(aten.neg.default, (x,), unknown=[x])
            for target in DTYPES:
                yield f"cast {dtype} {x_name} to {target}", _case(aten._to_copy.default, (x,), {"dtype": target})
            other = operands["binary"]
            yield f"cat {dtype} {x_name}", _case(aten.cat.default, ([x, other],))
            yield f"cat {dtype} {x_name} dim 1", _case(aten.cat.default, ([x, other, x], 1))
            yield f"stack {dtype} {x_name}", _case(aten.stack.default, ([x, other],))
            yield f"stack {dtype} {x_name} alone", _case(aten.stack.default, ([x],))
            yield f"cat {dtype} {x_name} a part unknown", _case(aten.cat.default, ([x, other],), unknown=[other])


def _cases() -> dict[tuple[str, str], dict[str, tuple]]:
    """The cases whose op runs (torch refuses some: a bool's negation or subtraction), grouped by
    the op's rule and the first operand's dtype."""
    groups: dict[tuple[str, str], dict[str, tuple]] = {}
    for name, case in (*_arithmetic_cases(), *_element_cases()):
        op, args, kwargs, _ = case
        try:
            op(*args, **kwargs)
        except RuntimeError:
            continue
        rule = PROPAGATION[str(op)]
        group = (getattr(rule, "__name__", "rule") if str(op) not in _ARITHMETIC else str(op), name.split()[1])
        groups.setdefault(group, {})[name] = case
    return groups


_ARITHMETIC = {"aten.add.Tensor", "aten.sub.Tensor", "aten.mul.Tensor", "aten.div.Tensor"}
CASES = _cases()

def _decide(case) -> tuple:
    """(what the output holds, the Python rule's result, the compiled rule's) for one case."""
    op, args, kwargs, known = case
    out = op(*args, **kwargs)
    rule = PROPAGATION[str(op)]
    python = rule(args, kwargs, out, lambda t: known.get(id(t)))
    compiled = _native.propagate(compiled_propagation(str(op), rule), args, kwargs, out, known)
    return truth(out), None if python is None else tuple(python), compiled


@pytest.mark.parametrize("group", sorted(CASES), ids=" ".join)
def test_both_rules_give_what_the_output_holds_and_decide_alike(group):
    wrong = []
    for name, case in CASES[group].items():
        expected, python, compiled = _decide(case)
        if python is not None and python != expected:
            wrong.append(f"{name}: the Python rule gives {python}, the output holds {expected}")
        if isinstance(compiled, tuple) and compiled != expected:
            wrong.append(f"{name}: the compiled rule gives {compiled}, the output holds {expected}")
        if compiled != "python" and compiled != python:  # "python": it leaves the decision to the Python rule
            wrong.append(f"{name}: the compiled rule gives {compiled}, the Python rule {python}")
    assert not wrong, f"{len(wrong)} of {len(CASES[group])} cases: " + "; ".join(wrong[:10])


def test_each_rule_applies_somewhere_in_both():
    # A rule that always said "scan" would pass the test above: each twin must claim the
    # output's statistics in some cases of each rule.
    claimed: dict[str, list[int]] = {}
    for (rule, _), cases in CASES.items():
        counts = claimed.setdefault(rule, [0, 0, 0])
        for case in cases.values():
            _, python, compiled = _decide(case)
            counts[0] += python is not None
            counts[1] += isinstance(compiled, tuple)
            counts[2] += compiled == "python"
    assert len(claimed) == 9 and all(python and compiled for python, compiled, _ in claimed.values()), claimed
    assert claimed["aten.mul.Tensor"][2] > 0  # a 0/1 x times a number: its rounding is the Python rule's


def _capture_outputs(path, monkeypatch, slow: str, cases: list[tuple]) -> tuple[list, int]:
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, slow)
    with Recorder(path) as recorder:
        for op, args, kwargs, _ in cases:
            op(*args, **kwargs)
        compiled = recorder.ops.native.recorded if recorder.ops.native is not None else 0
    monkeypatch.delenv(ENVIRONMENT_VARIABLE)
    with open_trace(path) as trace:
        rows = trace.sql("SELECT e.op, t.nnz, t.is01 FROM events e JOIN event_tensors u USING (seq) "
                         "JOIN tensors t USING (tensor_id) WHERE u.role = 'out' ORDER BY e.seq")
    return [(op, int(nnz), bool(is01)) for op, nnz, is01 in rows.itertuples(index=False)], compiled


def test_each_record_writes_the_outputs_statistics(tmp_path, monkeypatch):
    # The cases captured through the compiled record and through the Python one: every output's
    # row holds what the output holds, whichever rule (or scan) gave it.
    named = [(name, case) for group in CASES.values() for name, case in group.items() if "unknown" not in name]
    cases = [case for _, case in named]
    expected = []
    for _name, case in named:
        held, _, _ = _decide(case)
        expected.append((str(case[0]), *held))
    compiled, taken = _capture_outputs(tmp_path / "compiled", monkeypatch, "", cases)
    python, none_taken = _capture_outputs(tmp_path / "python", monkeypatch, "native_record", cases)
    assert taken > len(cases) // 2 and none_taken == 0
    assert compiled == expected
    assert python == expected
