"""A large trace made of a small captured one: the captured rows tiled K times, every id
renumbered (seq, freed_seq, first_seq, tensor_id and the tensor-id lists of module_events, uid,
stage_id, step, call_index) so that the result is a valid trace; scopes and modules are shared,
not tiled. Tiles stream through spiketrace.capture.store.writer.TraceWriter (its zstd level,
delta encoding, footer keys and manifest), one part at a time. Used by analysis_throughput.py
and engine_comparison.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from spiketrace.capture.store.writer import TraceWriter
from spiketrace.schemas.tables import TABLES

SHARED = ("scopes", "modules")  # written once: every tile refers to the same scope and module ids
# table -> column -> its span: tile k adds k * span, span = 1 + the largest value in the captured steps
SHIFTS = {
    "events": {"seq": "seq", "step": "step", "stage_id": "stage"},
    "event_tensors": {"seq": "seq", "tensor_id": "tensor"},
    "tensors": {"tensor_id": "tensor", "uid": "uid", "first_seq": "seq"},
    "tensor_frees": {"uid": "uid", "freed_seq": "seq"},
    "op_stats": {"seq": "seq"},
    "packed_inputs": {"seq": "seq", "tensor_id": "tensor"},
    "module_events": {"seq": "seq", "step": "step", "stage_id": "stage", "call_index": "module_call",
                      "inputs": "tensor", "outputs": "tensor", "kwarg_inputs": "tensor"},
    "neuron_memories": {"seq": "seq", "tensor_id": "tensor"},
    "stage_markers": {"seq": "seq", "stage_id": "stage", "step": "step"},
    "optimizer_steps": {"seq": "seq", "step": "step", "call_index": "optimizer_call"},
    "collectives": {"seq": "seq"},
}


def spans(source: dict[str, pa.Table]) -> dict[str, int]:
    result: dict[str, int] = {}
    for name, columns in SHIFTS.items():
        if name not in source:
            continue
        for column, key in columns.items():
            values = source[name][column]
            values = pc.list_flatten(values) if pa.types.is_list(values.type) else values
            top = pc.max(values).as_py() if len(values) else None
            result[key] = max(result.get(key, 1), 1 + (top or 0))
    return result


def tile(table: pa.Table, name: str, first: int, n: int, span: dict[str, int]) -> pa.Table:
    """`n` copies of `table`, copy i renumbered as tile `first + i`."""
    if not table.num_rows:
        return table
    big = pa.concat_tables([table] * n).combine_chunks()
    delta_of_row = np.repeat(np.arange(first, first + n, dtype=np.int64), table.num_rows)
    for column, key in SHIFTS[name].items():
        array, delta = big[column].chunk(0), delta_of_row * span[key]
        if pa.types.is_list(array.type):  # shift the values, keep offsets and null lists
            values = pc.add(array.flatten(), pa.array(delta[pc.list_parent_indices(array).to_numpy()], array.type.value_type))
            offsets = pc.subtract(array.offsets, array.offsets[0])
            shifted = pa.ListArray.from_arrays(offsets, values, type=array.type, mask=array.is_null())
        else:
            shifted = pc.add(array, pa.array(delta, array.type))
        big = big.set_column(big.schema.get_field_index(column), big.schema.field(column), shifted)
    return big


def commit_part(writer: TraceWriter, name: str, table: pa.Table) -> None:
    """Write `table` as one part of `name` and list its entry (path, rows, bytes, checksum) in the
    manifest's parts and counts; the next write_manifest commits it."""
    _, entry = writer._write_part(name, table)
    writer.parts[name].append(entry)
    writer.counts[name] += table.num_rows


def build(source_path: Path, path: Path, min_events: int, part_events: int, *, rank: int = 0,
          world_size: int = 1) -> int:
    """Write a tiled trace of at least `min_events` events, one part at a time, as rank `rank` of
    `world_size` (the ranks of one trace built one after another share its run id); returns its events."""
    source = {t: pq.read_table(source_path / t).drop_columns(["rank"]).combine_chunks() for t in TABLES
              if (source_path / t).exists()}  # a table the capture wrote no part of stays empty
    manifest = json.loads((source_path / "manifest.json").read_text())
    span, per_tile = spans(source), source["events"].num_rows
    tiles, per_part = -(-min_events // per_tile), max(1, part_events // per_tile)
    writer = TraceWriter(path, rank=rank, world_size=world_size, settings=manifest["settings"], versions=manifest["versions"],
                         metadata=manifest["metadata"] | {"tiled_from": str(source_path), "tiles": tiles})
    for first in range(0, tiles, per_part):
        for name, table in source.items():
            if first == 0 or (name not in SHARED and table.num_rows):
                part = table if name in SHARED else tile(table, name, first, min(per_part, tiles - first), span)
                commit_part(writer, name, part)
        writer.part_index += 1
        writer.write_manifest()
    writer.manifest["steps_recorded"] = manifest["steps_recorded"] * tiles
    writer.close()  # every table has a part, so this only marks the manifest complete
    return writer.counts["events"]
