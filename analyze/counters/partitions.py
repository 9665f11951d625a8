"""Which ops are evaluated together: ops grouped by the op_facts columns their rules read, so
each SQL pass gathers only those columns for only its events (see engine.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Partition:
    """Ops whose rules read about the same op_facts columns, evaluated together over just
    those columns of just their events."""

    ops: list[str]
    columns: set[str]
    sql: str = ""


def partitions(calls: dict[str, int], reads: dict[str, set[str]], share: int = 16, pass_cells: int = 10**6) -> list[Partition]:
    """Ops grouped by the columns their rules read. A group of fewer than 1/`share` of the
    events joins the partition where it adds the fewest cells to gather, if fewer than a
    partition of its own would cost (one more SQL pass, as much as gathering `pass_cells`)."""
    groups: dict[frozenset, list[str]] = {}
    for op in sorted(calls):
        groups.setdefault(frozenset(reads.get(op, ())), []).append(op)
    total = sum(calls.values())
    ordered = sorted(groups.items(), key=lambda item: (-sum(calls[op] for op in item[1]), sorted(item[1])))
    parts: list[Partition] = []
    for columns, ops in ordered:
        rows = sum(calls[op] for op in ops)
        added = {id(p): rows * len(p.columns - columns) + sum(calls[op] for op in p.ops) * len(columns - p.columns)
                 for p in parts}  # cells to gather more if the group joins p
        best = min(parts, key=lambda p: added[id(p)], default=None)
        if best is None or share * rows >= total or added[id(best)] >= pass_cells:
            parts.append(Partition(list(ops), set(columns)))
        else:
            best.ops += ops
            best.columns |= columns
    return parts
