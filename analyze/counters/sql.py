"""Small SQL vocabulary the counter rules are written in (DuckDB dialect).

A rule is a SQL expression over one row of the `op_facts` relation (analyze/counters/facts.py):
tensor facts of each operand slot (`a0_numel`, `a1_shape`, `o0_bytes`, `a2_present`, ...),
the op's non-tensor arguments as JSON (`args`, `kwargs`) and its activity statistics
(`stat_conv_spike_taps`, ...). Lists are 1-based in DuckDB: `a0_shape[1]` is dim 0.

A float argument JSON cannot hold (NaN, inf, -inf) is the tagged object {"$float": "nan"}
(capture/ops/arguments.py); `json_number` reads it as that double, so a rule comparing a scalar
(`alpha <> 1`) sees NaN or an infinity instead of failing to cast the object.
"""

from __future__ import annotations

MACROS = (
    "CREATE OR REPLACE MACRO prod(l) AS CASE WHEN l IS NULL OR len(l) = 0 THEN 1::BIGINT "
    "ELSE list_reduce(l, lambda a, b: a * b) END",
    # A JSON number as DOUBLE; a {"$float": "nan" | "inf" | "-inf"} tag as that double; NULL
    # for any other object ($complex, $repr, ...), where no real number is meant.
    "CREATE OR REPLACE MACRO json_number(j) AS CASE WHEN json_type(j) = 'OBJECT' "
    "THEN TRY_CAST(json_extract_string(j, '$.\"$float\"') AS DOUBLE) ELSE j::DOUBLE END",
)

# Casts of a JSON scalar that must read a tagged non-finite float (json_number).
_FLOATS = ("DOUBLE",)


def _typed(json: str, type_: str) -> str:
    return f"json_number({json})" if type_ in _FLOATS else f"{json}::{type_}"


def arg(i: int, type_: str = "BIGINT") -> str:
    """The i-th positional argument (JSON) cast to `type_` (a DOUBLE through json_number)."""
    return _typed(f"json_extract(args, '$[{i}]')", type_)


def arg_item(i: int, j: int, type_: str = "BOOLEAN") -> str:
    return f"json_extract(args, '$[{i}][{j}]')::{type_}"


def arg_list(i: int) -> str:
    return f"json_extract(args, '$[{i}]')::BIGINT[]"


def arg_is_null(i: int) -> str:
    return f"coalesce(json_extract(args, '$[{i}]')::VARCHAR = 'null', true)"


def kwarg(name: str, default, type_: str = "DOUBLE") -> str:
    read = _typed(f"json_extract(kwargs, '$.{name}')", type_)
    return f"coalesce({read}, {default})"


def values_known(rule: str, *slots: str) -> str:
    """`rule`, or NULL (the event is reported as uncovered) where an operand's is01 is unknown:
    a meta tensor (or fake one) has no values, so capture records no nnz/is01 for it, and a
    rule reading null as "not a spike" would guess."""
    unknown = " OR ".join(f"{slot}_is01 IS NULL" for slot in slots)
    return f"CASE WHEN {unknown} THEN NULL ELSE {rule} END"


# cumsum(x, dim): n - 1 adds along each line of n = x.shape[dim] elements (dim may be negative;
# a 0-dim x is one line of one element).
_DIM = "((" + arg(1) + " % greatest(len(a0_shape), 1)) + greatest(len(a0_shape), 1)) % greatest(len(a0_shape), 1)"
CUMSUM_ADDS = f"(CASE WHEN len(a0_shape) = 0 THEN 0 ELSE a0_numel - a0_numel // greatest(a0_shape[{_DIM} + 1], 1) END)"
# Ops that select each output element from an operand or a fill value (no arithmetic).
SELECTIONS = ("aten.masked_fill.Scalar", "aten.masked_fill.Tensor", "aten.masked_fill_.Scalar",
              "aten.masked_fill_.Tensor", "aten.where.self", "aten.where.ScalarSelf", "aten.where.ScalarOther",
              "aten.where.Scalar")
