"""Compaction (capture/store/compaction.py): small parts merged into few, rows and numbers unchanged,
damage never merged, and a failure leaves the committed trace as it was."""

from __future__ import annotations

import json
import shutil

import pytest

from spiketrace.analyze import open_trace
from spiketrace.analyze.counters import count
from spiketrace.analyze.energy import energy
from spiketrace.capture.store.compaction import CompactionError, compact_rank, plan
from spiketrace.capture.store.writer import atomic_write_text, write_part
from spiketrace.schemas import layout

pytest.importorskip("spikingjelly")

MB = 1 << 20


def entries(*sizes):
    return [{"path": f"events/rank=0/part-{i:05d}.parquet", "bytes": size} for i, size in enumerate(sizes)]


@pytest.mark.parametrize(("sizes", "small", "target", "runs"), [
    # every part small and all fit: one run
    ((10, 10, 10), 100, 1000, [range(3)]),
    # a big part splits the runs; a lone small part is not worth rewriting
    ((10, 10, 500, 10, 500, 10, 10, 10), 100, 1000, [range(2), range(5, 8)]),
    # the target bounds a run: 40+40 fit in 100, the third starts a new run with the fourth
    ((40, 40, 40, 40, 40), 100, 100, [range(2), range(2, 4)]),
    ((), 100, 1000, []),
    ((500, 500), 100, 1000, []),
])
def test_plan_merges_neighbouring_small_parts_within_the_target(sizes, small, target, runs):
    assert plan(entries(*sizes), small, target) == runs


def record(path, **options):
    from tests.training_runs import record

    return record(path, 3, flush_events=30, **options)


def numbers(root):
    with open_trace(root) as trace:
        assert trace.validate() == [] and trace.warnings == []
        tables = {table: trace.arrow(f"SELECT * FROM {table} ORDER BY ALL") for table in trace.parts}
        return (count(trace).totals(), energy(trace, "neuromc").energy_total_pj, tables,
                {table: len(parts) for table, parts in trace.parts.items()})


def test_compaction_merges_small_parts_and_changes_no_row(tmp_path):
    root = record(tmp_path / "plain", compact=False)
    shutil.copytree(root, tmp_path / "compacted")
    before, after = _compact(tmp_path / "compacted")
    plain_totals, plain_energy, plain_tables, plain_parts = numbers(root)
    totals, total_energy, tables, parts = numbers(tmp_path / "compacted")
    assert plain_parts["events"] > 10 and parts["events"] == 1 and (before, after) == (
        sum(plain_parts.values()), len(parts))
    assert totals == plain_totals and total_energy == plain_energy
    assert all(tables[name].equals(plain_tables[name]) for name in tables)


def test_compaction_at_close_leaves_only_committed_parts(tmp_path):
    plain_totals, plain_energy, _, _ = numbers(record(tmp_path / "plain", compact=False))
    totals, total_energy, _, parts = numbers(record(tmp_path / "compacted"))
    assert set(parts.values()) == {1}  # 3 small steps of every table fit in one part each
    assert totals == plain_totals and total_energy == plain_energy
    # Only committed parts remain on disk: the replaced ones were removed after the commit.
    on_disk = {p.relative_to(tmp_path / "compacted").as_posix() for p in (tmp_path / "compacted").rglob("*.parquet")}
    manifest = json.loads((tmp_path / "compacted" / layout.MANIFEST_NAME).read_text())
    assert on_disk == {entry["path"] for listed in manifest["parts"].values() for entry in listed}


def _compact(root, **options):
    manifest_file = root / layout.MANIFEST_NAME
    manifest = json.loads(manifest_file.read_text())
    return compact_rank(root, 0, manifest, lambda m: atomic_write_text(manifest_file, json.dumps(m)), write_part,
                        small_bytes=MB, **options)


def test_a_damaged_part_is_never_merged_and_nothing_changes(tmp_path):
    root = record(tmp_path / "t", compact=False)
    manifest_before = (root / layout.MANIFEST_NAME).read_text()
    files_before = sorted(p.name for p in root.rglob("*.parquet"))
    victim = root / json.loads(manifest_before)["parts"]["tensors"][2]["path"]
    raw = bytearray(victim.read_bytes())
    raw[len(raw) // 2] ^= 0x10
    victim.write_bytes(bytes(raw))
    with pytest.raises(CompactionError, match="checksum mismatch") as refused:
        _compact(root)
    assert str(victim) in str(refused.value)
    assert (root / layout.MANIFEST_NAME).read_text() == manifest_before
    assert sorted(p.name for p in root.rglob("*.parquet")) == files_before  # the merged parts it wrote are gone


def test_a_failed_commit_leaves_the_old_parts_committed(tmp_path):
    root = record(tmp_path / "t", compact=False)
    manifest_before = (root / layout.MANIFEST_NAME).read_text()

    def failing_commit(manifest):
        raise OSError(28, "No space left on device")

    manifest = json.loads(manifest_before)
    with pytest.raises(OSError):
        compact_rank(root, 0, manifest, failing_commit, write_part, small_bytes=MB)
    assert manifest["parts"] == json.loads(manifest_before)["parts"]  # the caller's dict restored
    with open_trace(root) as trace:
        assert trace.validate() == [] and trace.warnings == []


def test_compacting_twice_changes_nothing_more(tmp_path):
    root = record(tmp_path / "t", compact=False)
    before, after = _compact(root)
    assert after < before
    assert _compact(root) == (after, after)
