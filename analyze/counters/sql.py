"""Small SQL vocabulary the counter rules are written in (DuckDB dialect).

A rule is a SQL expression over one row of the `op_facts` relation (analyze/counters/facts.py):
tensor facts of each operand slot (`a0_numel`, `a1_shape`, `o0_bytes`, `a2_present`, ...),
the op's non-tensor arguments as JSON (`args`, `kwargs`) and its activity statistics
(`stat_conv_spike_taps`, ...). Lists are 1-based in DuckDB: `a0_shape[1]` is dim 0.
"""

from __future__ import annotations

MACROS = (
    "CREATE OR REPLACE MACRO prod(l) AS CASE WHEN l IS NULL OR len(l) = 0 THEN 1::BIGINT "
    "ELSE list_reduce(l, lambda a, b: a * b) END",
)


def arg(i: int, type_: str = "BIGINT") -> str:
    """The i-th positional argument (JSON) cast to `type_`."""
    return f"json_extract(args, '$[{i}]')::{type_}"


def arg_item(i: int, j: int, type_: str = "BOOLEAN") -> str:
    return f"json_extract(args, '$[{i}][{j}]')::{type_}"


def arg_list(i: int) -> str:
    return f"json_extract(args, '$[{i}]')::BIGINT[]"


def arg_is_null(i: int) -> str:
    return f"coalesce(json_extract(args, '$[{i}]')::VARCHAR = 'null', true)"


def kwarg(name: str, default, type_: str = "DOUBLE") -> str:
    return f"coalesce(json_extract(kwargs, '$.{name}')::{type_}, {default})"
