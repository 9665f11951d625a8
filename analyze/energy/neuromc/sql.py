"""SQL vocabulary shared by the NeuroMC mappers (DuckDB dialect, lists are 1-based).

SpikingJelly reads a tensor's layout as (T, B, C, spatial): [T, N, C, ...] for a module in
multi-step mode, [N, C, ...] otherwise (spec 3.3.2, `_tensor_layout`). These helpers write
those readings as SQL over a tensor_states row aliased `t`, so every rule below is one
vectorised expression over all calls.
"""

from __future__ import annotations

from spiketrace.analyze.counters.sql import MACROS

# Macros the NeuroMC SQL uses on top of the counters' `prod`.
NEUROMC_MACROS = (
    *MACROS,
    # Rows x columns of a fragment's spatial dims as SpikingJelly reads them: (L,) -> (L, 1),
    # () -> (1, 1); beyond two dims (Conv3d) the leading ones fold into the rows.
    ("CREATE OR REPLACE MACRO nmc_rows(s) AS CASE WHEN s IS NULL OR len(s) = 0 THEN 1::BIGINT "
     "WHEN len(s) = 1 THEN s[1] ELSE prod(s[1:len(s) - 1]) END"),
    "CREATE OR REPLACE MACRO nmc_cols(s) AS CASE WHEN s IS NOT NULL AND len(s) >= 2 THEN s[len(s)] ELSE 1::BIGINT END",
    "CREATE OR REPLACE MACRO nmc_spike(is01, numel) AS coalesce(is01, false) AND coalesce(numel, 0) > 0",
    ("CREATE OR REPLACE MACRO nmc_op_is_ignored(op, prefixes) AS "
     "len(list_filter(prefixes, lambda p: starts_with(op, p))) > 0"),
)


def install(con) -> None:
    for macro in NEUROMC_MACROS:
        con.execute(macro)


def quoted_list(names) -> str:
    return "[" + ", ".join("'" + str(n).replace("'", "''") + "'" for n in names) + "]::VARCHAR[]"


def layout(t: str, multi_step: str) -> dict[str, str]:
    """SpikingJelly's (T, B, C, spatial) of tensor alias `t` for a module whose step mode is
    multi-step when the SQL boolean `multi_step` holds."""
    return {
        "T": f"CASE WHEN {multi_step} THEN {t}_shape[1] ELSE 1 END",
        "B": f"CASE WHEN {multi_step} THEN {t}_shape[2] WHEN len({t}_shape) > 0 THEN {t}_shape[1] ELSE 1 END",
        "C": f"CASE WHEN {multi_step} THEN {t}_shape[3] WHEN len({t}_shape) >= 2 THEN {t}_shape[2] ELSE {t}_numel END",
        "spatial": f"CASE WHEN {multi_step} THEN {t}_shape[4:] ELSE {t}_shape[3:] END",
    }


def rows_of_features(t: str, multi_step: str) -> str:
    """Every leading dim of a Linear input ([..., in_features]) is a row of the GEMM; the
    time dim, in multi-step mode, is T. SpikingJelly takes only dim 0 (dim 1 multi-step)."""
    return (f"CASE WHEN {multi_step} THEN prod({t}_shape[2:len({t}_shape) - 1]) "
            f"ELSE prod({t}_shape[1:len({t}_shape) - 1]) END")


def tensor_columns(alias: str, id_column: str, table: str = "tensor_states") -> tuple[str, str]:
    """(select list, join) bringing shape/numel/is01/requires_grad of tensor `id_column` as `alias`_*."""
    select = (f"{alias}.shape AS {alias}_shape, {alias}.numel AS {alias}_numel, {alias}.is01 AS {alias}_is01, "
              f"{alias}.requires_grad AS {alias}_requires_grad, {alias}.element_size AS {alias}_element_size")
    join = f"LEFT JOIN {table} {alias} ON {alias}.rank = c.rank AND {alias}.tensor_id = c.{id_column}"
    return select, join


def used_tensors(calls: str, id_columns) -> str:
    """SQL of the tensor states the rows of `calls` name in `id_columns`, found by a semi join:
    joining tensor_states itself would build a hash table of every state of the trace."""
    ids = " UNION ALL ".join(f"SELECT rank, {column} AS tensor_id FROM {calls}" for column in id_columns)
    return (f"SELECT t.rank, t.tensor_id, t.shape, t.numel, t.is01, t.requires_grad, t.element_size FROM tensor_states t "
            f"SEMI JOIN ({ids}) w ON w.rank = t.rank AND w.tensor_id = t.tensor_id")


def ignored_module_condition(path_column: str, rank_column: str, ignore_names) -> str:
    """SQL true when the module at `path_column`, or an ancestor, matches `ignore_names`
    (class names, dotted class paths or module paths)."""
    if not ignore_names:
        return "false"
    listed = quoted_list(ignore_names)
    return f"""EXISTS (SELECT 1 FROM modules a WHERE a.rank = {rank_column} AND a.in_model
        AND ({path_column} = a.path OR starts_with({path_column}, a.path || '.'))
        AND (list_has_any(a.mro, {listed}) OR list_contains({listed}, a.class_name) OR list_contains({listed}, a.path)))"""
