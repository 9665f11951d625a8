"""The vocabulary of `op_facts`, one row per event with the operand facts counter rules read
(built by analyze/counters/gather.py).

Rules name operand facts by slot: `a<i>_<fact>` is the tensor passed as positional argument i,
`o<j>_<fact>` the j-th output, `a<i>_items_<fact>` the sum over the items of a tensor-list
argument, `k_<name>_<fact>` a keyword tensor. Facts: numel, bytes, shape, is01, nnz, requires_grad, present.
Always there: `tensor_bytes` (all the op's tensors) and `out_bytes` (all its outputs).
Only the columns the requested rules mention are built, so the relation stays as narrow as
the question asked of it. Op statistics appear as `stat_<name>`.

Rules are written against that vocabulary; two rewrites make them cheaper to evaluate and
give the same values:
* Shapes are read almost only as `a0_shape[i]` (dim i-1) and `prod(a0_shape[k:])`. Those two
  forms become integer columns computed once per tensor state (`a0_shape_i`,
  `a0_shape_prod_k`, see `compile_rule` and `shape_facts`): gathering and evaluating lists
  per event costs several times more. Any other use of `a0_shape` still gets the list column.
* A typed read of the JSON arguments such as `json_extract(args, '$[7]')::BOOLEAN` or
  `json_number(json_extract(kwargs, '$.alpha'))` becomes a column `json_<n>` (see
  `JSON_READ`), evaluated once per distinct (op, string).
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spiketrace.schemas.statistics import STATISTICS

_SLOT_NAME = r"(?:[ao]\d+|k_[a-z_]+?)"
_SLOT = re.compile(r"\b(a|o)(\d+)_(items_)?(numel|bytes|shape|is01|nnz|requires_grad|present)\b")
_KWARG = re.compile(r"\bk_([a-z_]+?)_(numel|bytes|shape|is01|nnz|requires_grad|present)\b")
_STAT = re.compile(r"\bstat_([a-z_0-9]+)\b")
# the shape forms served by per-tensor integer columns, and those columns' names
_SHAPE_PROD = re.compile(rf"\bprod\(({_SLOT_NAME})_shape(?:\[(\d+):\])?\)")
_SHAPE_DIM = re.compile(rf"\b({_SLOT_NAME})_shape\[(\d+)\]")
_SHAPE_COLUMN = re.compile(rf"\b({_SLOT_NAME})_shape_(prod_)?(\d+)\b")


# A typed read of the JSON args/kwargs, e.g. json_extract(args, '$[7]')::BOOLEAN or
# json_number(json_extract(kwargs, '$.alpha')) (a DOUBLE, analyze/counters/sql.py): the same few
# distinct strings recur in every event of an op, so gather.py evaluates such a read once per
# distinct (op, string) of a chunk and the rule reads its column `json_<n>` instead. Group
# `source` names the JSON column read.
JSON_READ = re.compile(r"(?P<number>json_number\()?json_extract\((?P<source>args|kwargs), '(?:[^']|'')*'\)"
                       r"(?(number)\)|::[A-Z]+(?:\[\])?)(?![\w(\[])")


def json_reads(expressions) -> list[str]:
    """The distinct typed JSON reads of `expressions`, in order of appearance."""
    return list(dict.fromkeys(m.group(0) for e in expressions for m in JSON_READ.finditer(e)))


def json_read_source(read: str) -> str:
    """The column (args or kwargs) a typed JSON read of json_reads reads."""
    match = JSON_READ.fullmatch(read)
    if match is None:
        raise ValueError(f"not a typed JSON read: {read!r}")
    return match.group("source")


@lru_cache(maxsize=4096)
def compile_rule(expression: str) -> str:
    """`expression` with `X_shape[i]` (i >= 1) and `prod(X_shape[k:])` replaced by the
    equivalent columns `X_shape_i` and `X_shape_prod_k`."""
    expression = _SHAPE_PROD.sub(lambda m: f"{m.group(1)}_shape_prod_{int(m.group(2) or 1)}", expression)
    return _SHAPE_DIM.sub(lambda m: f"{m.group(1)}_shape_{int(m.group(2))}"
                          if int(m.group(2)) >= 1 else m.group(0), expression)


# Event columns a rule may read as they are (besides the operand facts).
EVENT_COLUMNS = ("rank", "seq", "step", "stage", "phase", "scope_id", "args", "kwargs")
_EVENT = re.compile(rf"\b({'|'.join(EVENT_COLUMNS)}|tensor_bytes|out_bytes|json_\d+)\b")


@lru_cache(maxsize=4096)
def columns_of(expression: str) -> frozenset[str]:
    """Every op_facts column the (compiled) expression reads: operand facts, `stat_<name>`,
    event columns, tensor_bytes, out_bytes and `json_<n>`."""
    columns, stats = referenced_columns([expression])
    return frozenset(columns) | {f"stat_{s}" for s in stats} | {m.group(1) for m in _EVENT.finditer(expression)}


@lru_cache(maxsize=4096)
def column_fact(column: str) -> tuple[tuple[str, str, bool], str] | None:
    """((kind, position or name, items?), fact) of an operand column, None for any other."""
    found = slots([column]) if _SLOT.fullmatch(column) or _KWARG.fullmatch(column) or _SHAPE_COLUMN.fullmatch(column) else {}
    return next(((slot, fact) for slot, facts in found.items() for fact in facts), None)


PROD_OF_NULL = 1  # prod(NULL) in analyze/counters/sql.py: the shape product of an absent slot


def shape_facts(shape: pa.ListArray, facts) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
    """Per list, the values DuckDB gives for `shape[i]` (fact `shape_<i>`, 1-based, NULL past
    the end) and `prod(shape[k:])` (fact `shape_prod_<k>`: 1 for an empty or NULL list, NULL
    when an element it multiplies is NULL; a BIGINT overflow is an error)."""
    lengths = np.asarray(pc.fill_null(pc.list_value_length(shape), 0).to_numpy(), dtype=np.int64)
    starts = np.cumsum(lengths) - lengths
    flat = pc.list_flatten(shape)
    flat_valid = np.asarray(flat.is_valid().to_numpy(zero_copy_only=False), bool) if flat.null_count else None
    flat = np.asarray(pc.fill_null(flat, 0).to_numpy(zero_copy_only=False))
    flat = flat.astype(np.int64) if len(flat) else np.zeros(1, np.int64)
    result = {}
    for fact in facts:
        k = int(fact.rsplit("_", 1)[1])
        if not fact.startswith("shape_prod_"):
            has = lengths >= k
            at = np.where(has, starts + k - 1, 0)
            result[fact] = (flat[at], has if flat_valid is None else has & flat_valid[at])
            continue
        list_of = np.repeat(np.arange(len(lengths)), lengths)
        taken = np.arange(len(list_of)) - starts[list_of] >= k - 1  # elements from the k-th on
        values = np.where(taken, flat[:len(list_of)], 1)
        product, magnitude = np.ones(len(lengths), dtype=np.int64), np.ones(len(lengths))
        nonempty = np.flatnonzero(lengths > 0)
        if len(nonempty):
            product[nonempty] = np.multiply.reduceat(values, starts[nonempty])
            magnitude[nonempty] = np.multiply.reduceat(np.abs(values.astype(np.float64)), starts[nonempty])
        if (magnitude >= 2.0**63).any():
            raise OverflowError(f"prod(shape[{k}:]) of a tensor state overflows BIGINT")
        valid = None
        if flat_valid is not None:
            valid = np.bincount(list_of[taken & ~flat_valid], minlength=len(lengths)) == 0
        result[fact] = (product, valid)
    return result


def referenced_columns(expressions) -> tuple[list[str], list[str]]:
    """(operand columns, statistic names) the (compiled) expressions mention."""
    text = "\n".join(expressions)
    columns = {m.group(0) for pattern in (_SLOT, _KWARG, _SHAPE_COLUMN) for m in pattern.finditer(text)}
    stats = {m.group(1) for m in _STAT.finditer(text)}
    unknown = stats - set(STATISTICS)
    if unknown:
        raise ValueError(f"rules mention unknown op statistics: {sorted(unknown)}")
    return sorted(columns), sorted(stats)


def slots(columns: list[str]) -> dict[tuple[str, str, bool], set[str]]:
    """(kind, position or name, items?) -> the facts read of that slot; a shape column's fact
    is its name after the slot, e.g. `shape_2` or `shape_prod_3`."""
    slots: dict[tuple[str, str, bool], set[str]] = {}
    for column in columns:
        shape = _SHAPE_COLUMN.fullmatch(column)
        if shape:
            slot, prod, index = shape.groups()
            fact = f"shape_{prod or ''}{index}"
            column = f"{slot}_shape"  # classified like the list fact of the same slot
        slot = _SLOT.fullmatch(column)
        if slot:
            kind, index_, items, fact_ = slot.groups()
            key = (kind, index_, bool(items))
        else:
            kwarg = _KWARG.fullmatch(column)
            assert kwarg is not None, column  # column_fact passes operand columns only
            name, fact_ = kwarg.groups()
            key = ("k", name, False)
        slots.setdefault(key, set()).add(fact if shape else fact_)
    return slots
