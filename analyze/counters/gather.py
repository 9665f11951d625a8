"""Build the op_facts relation with array gathers instead of SQL joins.

Every event needs the facts of a few of its tensors (slot a0, a1, o0, ...). In SQL that is
one hash join per slot over the whole trace; here it is index arithmetic: events and tensor
states are sorted once by (rank, id), each tensor use finds its event row and its tensor row
by binary search, and each slot's facts are a `take` of the tensor columns. The result is an
Arrow table that DuckDB queries in place (registered as `op_facts_table`). Same columns and
meaning as analyze/counters/facts.py, which documents the slot vocabulary.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from analyze.counters.facts import referenced_columns, slots

_RANK_SHIFT = np.int64(1) << np.int64(40)  # seq and tensor ids stay far below 2**40


def _keys(table: pa.Table, id_column: str) -> np.ndarray:
    rank = table.column("rank").to_numpy().astype(np.int64)
    return rank * _RANK_SHIFT + table.column(id_column).to_numpy().astype(np.int64)


def _locate(sorted_keys: np.ndarray, order: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Row of each key in the table `sorted_keys` came from, -1 where absent."""
    position = np.searchsorted(sorted_keys, keys)
    position = np.minimum(position, max(len(sorted_keys) - 1, 0))
    found = len(sorted_keys) > 0
    hit = (sorted_keys[position] == keys) if found else np.zeros(len(keys), dtype=bool)
    return np.where(hit, order[position] if found else -1, -1)


def _bool(array) -> np.ndarray:
    return np.asarray(pc.fill_null(array, False).to_numpy(zero_copy_only=False), dtype=bool)


def build_op_facts(con, expressions, where: str = "true", uses_where: str = "true") -> pa.Table:
    """op_facts of the events matching `where`; `uses_where` (over rank and seq) narrows the
    tensor uses read to a chunk of the trace."""
    columns, stats = referenced_columns(expressions)
    events = con.sql(
        f"SELECT rank, seq, op, step, stage, phase, scope_id, args, kwargs FROM events WHERE {where}"
    ).to_arrow_table()
    uses = con.sql(
        f"SELECT rank, seq, role, position, name, item, tensor_id FROM event_tensors WHERE {uses_where}"
    ).to_arrow_table()
    tensors = con.sql(
        "SELECT rank, tensor_id, numel, numel * element_size AS bytes, shape, is01, nnz FROM tensor_states"
        f" WHERE (rank, tensor_id) IN (SELECT rank, tensor_id FROM event_tensors WHERE {uses_where})"
    ).to_arrow_table().combine_chunks()  # take() on one chunk is several times faster
    n = events.num_rows
    event_keys = _keys(events, "seq")
    event_order = np.argsort(event_keys, kind="stable")
    tensor_keys = _keys(tensors, "tensor_id")
    tensor_order = np.argsort(tensor_keys, kind="stable")
    use_event = _locate(event_keys[event_order], event_order, _keys(uses, "seq"))
    use_tensor = _locate(tensor_keys[tensor_order], tensor_order, _keys(uses.select(["rank", "tensor_id"]), "tensor_id"))
    valid = (use_event >= 0) & (use_tensor >= 0)
    role = uses.column("role").combine_chunks()
    position = pc.fill_null(uses.column("position"), -1).to_numpy().astype(np.int64)
    has_item = _bool(pc.is_valid(uses.column("item")))
    byte_values = tensors.column("bytes").to_numpy().astype(np.float64)
    role_masks = {name: valid & _bool(pc.equal(role, name)) for name in ("arg", "out", "kwarg")}
    is_out = role_masks["out"]

    def per_event_sum(mask: np.ndarray, values: np.ndarray) -> np.ndarray:
        return np.bincount(use_event[mask], weights=values[use_tensor[mask]], minlength=n)

    result = {name: events.column(name) for name in events.column_names}
    result["tensor_bytes"] = pa.array(per_event_sum(valid, byte_values).astype(np.int64))
    result["out_bytes"] = pa.array(per_event_sum(is_out, byte_values).astype(np.int64))
    for (kind, key, items), facts in sorted(slots(columns).items()):
        if kind == "k":
            prefix = f"k_{key}_"
            mask = role_masks["kwarg"] & _bool(pc.equal(uses.column("name"), key))
        else:
            prefix = f"{kind}{key}_{'items_' if items else ''}"
            mask = role_masks["arg" if kind == "a" else "out"] & (position == int(key))
            mask &= has_item if items else ~has_item
        if items:
            count = np.bincount(use_event[mask], minlength=n)
            for fact in facts:
                if fact == "present":
                    result[prefix + fact] = pa.array(count > 0)
                else:
                    values = tensors.column(fact).to_numpy().astype(np.float64)
                    summed = per_event_sum(mask, values).astype(np.int64)
                    result[prefix + fact] = pa.array(summed, mask=count == 0)
            continue
        index = np.full(n, -1, dtype=np.int64)
        index[use_event[mask]] = use_tensor[mask]
        taken = pa.array(index, mask=index < 0)
        for fact in facts:
            result[prefix + fact] = pa.array(index >= 0) if fact == "present" else pc.take(tensors.column(fact), taken)
    if stats:
        table = con.sql(
            f"SELECT rank, seq, stat, value FROM op_stats WHERE ({uses_where}) AND stat IN ("
            + ", ".join(f"'{s}'" for s in stats) + ")"
        ).to_arrow_table()
        stat_event = _locate(event_keys[event_order], event_order, _keys(table, "seq"))
        names = table.column("stat").combine_chunks()
        values = table.column("value").to_numpy()
        for name in stats:
            mask = (stat_event >= 0) & _bool(pc.equal(names, name))
            column = np.full(n, np.nan)
            column[stat_event[mask]] = values[mask]
            result[f"stat_{name}"] = pa.array(column, mask=np.isnan(column))
    return pa.table(result)
