"""spiketrace.analyze.open_trace: opening, checking and querying traces written by spiketrace.capture.store.writer.

Every trace here is synthetic: a TraceWriter filled by `write_trace` with the small, fixed
rows below, so each expected value is read off those rows, not off the reader.
"""

import collections
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

import spiketrace.analyze.trace.parts
import spiketrace.schemas.version
from spiketrace.analyze import Trace, TraceError, open_trace
from spiketrace.capture.store.writer import TraceWriter
from spiketrace.schemas import layout
from spiketrace.schemas.tables import TABLES
from spiketrace.schemas.version import SCHEMA_VERSION, SchemaVersionError
from tests.trace_surgery import recommit, rewrite_part

REPO = Path(__file__).resolve().parents[1]

# The ops of one rank's events, at seq 1, 2, ... (stage 0 spans seq 0..6, stage 1 begins at 7).
OPS = ["aten.convolution.default", "aten.add.Tensor", "aten.add.Tensor", "aten.mm.default", "aten.relu.default"]
# tensor_id -> uid; uid 100 is freed at seq 4, the others outlive the capture.
TENSORS = {10: 100, 11: 101, 12: 102}
FREES = {100: 4}
STAGES = [  # (stage_id, name, phase, begin_seq, end_seq or None)
    (0, "forward_b1", "forward", 0, 6),
    (1, "backward", "backward", 7, None),
]


def add_event(writer, seq, op, scope_id=0, stage_id=0, stage="forward_b1"):
    writer.tables["events"].append(
        seq=seq, op=op, step=0, stage_id=stage_id, stage=stage, phase="forward", grad_enabled=True,
        in_backward=False, thread=0, scope_id=scope_id, args="[]", kwargs="{}", out="null",
    )


def add_tensor(writer, tensor_id, uid):
    writer.tables["tensors"].append(
        tensor_id=tensor_id, uid=uid, version=0, first_seq=1, shape=[2, 3], stride=[3, 1], storage_offset=0,
        dtype="float32", element_size=4, device="cpu", requires_grad=False, numel=6, is_meta=False,
        storage_ptr=4096 + uid, is_parameter=False, parameter=None, nnz=3, is01=True,
    )


def add_stage_marker(writer, seq, kind, stage_id, name, phase):
    writer.tables["stage_markers"].append(
        seq=seq, kind=kind, stage_id=stage_id, name=name, phase=phase, phase_source="explicit",
        reuse_weights=False, batch_norm_backward=True, b_index=1 if "b1" in name else None, t_index=None, step=0,
    )


def fill(writer, ops=OPS):
    """Write the fixed rows above into `writer` (not flushed)."""
    writer.tables["scopes"].append(scope_id=0, parents=["Global"], active_modules=[])
    writer.tables["scopes"].append(scope_id=1, parents=["Global", "Root.fc"], active_modules=[0, 1])
    for module_id, path in enumerate(["Root", "Root.fc"]):
        writer.tables["modules"].append(
            module_id=module_id, path=path, tracker_name=path, in_model=True, parent_id=None if module_id == 0 else 0,
            class_name="Linear", class_module="torch.nn", mro=["torch.nn.Linear"], attributes="{}",
            parameters="[]", buffers="[]", is_leaf=module_id == 1,
        )
    for stage_id, name, phase, begin, end in STAGES:
        add_stage_marker(writer, begin, "begin", stage_id, name, phase)
        if end is not None:
            add_stage_marker(writer, end, "end", stage_id, name, phase)
    for seq, op in enumerate(ops, start=1):
        add_event(writer, seq, op, scope_id=seq % 2)
    for tensor_id, uid in TENSORS.items():
        add_tensor(writer, tensor_id, uid)
    for k, tensor_id in enumerate(TENSORS):
        writer.tables["event_tensors"].append(
            seq=1, k=k, role="arg" if k < 2 else "out", position=k, name=None, item=None, tensor_id=tensor_id
        )
    for uid, seq in FREES.items():
        writer.tables["tensor_frees"].append(uid=uid, freed_seq=seq)
    writer.tables["module_events"].append(
        seq=2, kind="forward_pre", module_id=1, tracker_name="Root.fc", call_index=0, step=0, stage_id=0,
        stage="forward_b1", phase="forward", grad_enabled=True, training=True, thread=0,
    )
    for param_index in range(2):  # one optimizer.step() call over two parameters
        writer.tables["optimizer_steps"].append(
            seq=8, step=0, optimizer_index=0, call_index=0, optimizer_class="SGD", group_index=0,
            hyperparameters="{}", param_index=param_index, parameter=None, module_id=1, shape=[3],
            ndim=1, numel=3, dtype="float32", has_grad=True, state_keys=[],
        )


def write_trace(root, *, rank=0, world_size=1, ops=OPS, close=True):
    writer = TraceWriter(root, rank=rank, world_size=world_size, metadata={"run": "test"}, device="cpu")
    fill(writer, ops)
    if close:
        writer.close()
    else:
        writer.flush()
    return Path(root)


@pytest.fixture
def trace_dir(tmp_path):
    return write_trace(tmp_path / "trace")


def part(root, table, rank=0, index=0):
    return layout.part_dir(root, table, rank) / layout.part_name(index)


def columns(trace, view):
    return [row[0] for row in trace.con.execute(f"DESCRIBE {view}").fetchall()]


# --- the views -----------------------------------------------------------------------------


def test_every_table_has_a_view_with_every_schema_column_and_rank(trace_dir):
    with open_trace(trace_dir) as trace:
        for table, schema in TABLES.items():
            expected = schema.names + ["rank"] + (["freed_seq"] if table == "tensors" else [])
            assert columns(trace, table) == expected
        assert columns(trace, "tensor_states") == TABLES["tensors"].names + ["rank"]
        types = dict(trace.con.execute("SELECT column_name, column_type FROM (DESCRIBE events)").fetchall())
        assert types["op"] == "VARCHAR" and types["stage"] == "VARCHAR" and types["rank"] == "INTEGER"


def test_views_read_the_rows_written(trace_dir):
    with open_trace(trace_dir) as trace:
        assert trace.sql("SELECT op FROM events ORDER BY seq")["op"].tolist() == OPS
        ops = dict(trace.sql("SELECT op, count(*) AS n FROM events GROUP BY op").itertuples(index=False))
        assert ops == dict(collections.Counter(OPS))
        assert trace.count("events") == len(OPS) and trace.count("stages") == len(STAGES)
        assert trace.files("events") == [part(trace_dir, "events")]
        assert trace.arrow("SELECT shape FROM tensors WHERE tensor_id = 10").to_pylist() == [{"shape": [2, 3]}]


def test_empty_table_reads_as_an_empty_view_with_its_columns(tmp_path):
    writer = TraceWriter(tmp_path / "t")
    add_event(writer, 0, "aten.add.Tensor")
    writer.close()  # every other table gets an empty part
    shutil.rmtree(tmp_path / "t" / "packed_inputs")
    writer_manifest = json.loads((tmp_path / "t" / "manifest.json").read_text())
    writer_manifest["status"] = "running"  # so the removed table is allowed to be missing
    writer_manifest["parts"]["packed_inputs"] = []  # a running trace that never committed one
    (tmp_path / "t" / "manifest.json").write_text(json.dumps(writer_manifest))
    with open_trace(tmp_path / "t") as trace:
        assert trace.files("packed_inputs") == []
        assert trace.count("packed_inputs") == 0 and trace.count("optimizer_steps") == 0
        assert columns(trace, "packed_inputs") == TABLES["packed_inputs"].names + ["rank"]
        assert trace.sql("SELECT * FROM packed_inputs").empty


def test_two_ranks_are_one_view_with_a_rank_column(tmp_path):
    write_trace(tmp_path / "t", rank=0, world_size=2, ops=OPS)
    write_trace(tmp_path / "t", rank=1, world_size=2, ops=OPS[:2])
    with open_trace(tmp_path / "t") as trace:
        assert trace.ranks == [0, 1] and trace.complete
        assert trace.manifests[1]["rank"] == 1 and trace.manifest["rank"] == 0
        per_rank = trace.sql("SELECT rank, count(*) AS n FROM events GROUP BY rank ORDER BY rank")
        assert per_rank.values.tolist() == [[0, len(OPS)], [1, 2]]
        assert trace.count("events") == len(OPS) + 2
        assert trace.sql("SELECT count(*) AS n FROM stages")["n"][0] == 2 * len(STAGES)
        assert trace.validate() == []


def test_key_value_directories_above_the_trace_add_no_column(tmp_path):
    root = write_trace(tmp_path / "lr=0.1" / "trace")  # hive partitioning would read lr from it
    with open_trace(root) as trace:
        assert columns(trace, "events") == TABLES["events"].names + ["rank"]
        assert trace.sql("SELECT count(*) AS n FROM events")["n"][0] == len(OPS)


def test_older_minor_part_missing_a_column_reads_it_as_null(tmp_path, monkeypatch):
    root = tmp_path / "t"
    writer = TraceWriter(root, compact=False)  # parts stay as flushed
    fill(writer)
    writer.flush()  # part 0: the tensors of fill(), all with is01 = True
    add_tensor(writer, 13, 103)
    writer.close()  # part 1: tensor 13
    # Pretend the reader is 1.1 and part 0 was written by 1.0, before is01 existed.
    monkeypatch.setattr(spiketrace.schemas.version, "SCHEMA_VERSION", "1.1")
    monkeypatch.setattr(spiketrace.analyze.trace.parts, "SCHEMA_VERSION", "1.1")
    monkeypatch.setitem(spiketrace.schemas.version.ADDED_IN, ("tensors", "is01"), "1.1")
    monkeypatch.setitem(spiketrace.schemas.version.ADDED_IN, ("tensors", "parameter"), "1.1")
    # Part 0 lacks is01; both parts lack parameter (as if added in 1.1 and never written).
    rewrite_part(part(root, "tensors", index=0), lambda t: t.drop_columns(["is01", "parameter"]), version="1.0")
    rewrite_part(part(root, "tensors", index=1), lambda t: t.drop_columns(["parameter"]), version="1.0")
    with open_trace(root) as trace:
        rows = trace.sql("SELECT tensor_id, is01, nnz, parameter FROM tensors ORDER BY tensor_id")
        assert rows["tensor_id"].tolist() == [*TENSORS, 13]
        assert rows["is01"].isna().tolist() == [True] * len(TENSORS) + [False]
        assert rows["nnz"].tolist() == [3] * (len(TENSORS) + 1)
        assert rows["parameter"].isna().all()
        types = dict(trace.con.execute("SELECT column_name, column_type FROM (DESCRIBE tensors)").fetchall())
        assert types["is01"] == "BOOLEAN" and types["parameter"] == "VARCHAR"
        assert columns(trace, "tensors") == TABLES["tensors"].names + ["rank", "freed_seq"]
    # A part of the version that has the column, without it, is damaged: NULLs would change numbers.
    rewrite_part(part(root, "tensors", index=1), lambda t: t.drop_columns(["is01"]), version="1.1")
    with pytest.raises(TraceError, match=r"part-00001.parquet: column \w+: missing \(schema 1.1 has it\)"):
        open_trace(root)


def test_unknown_extra_column_is_kept(trace_dir):
    extra = pa.array([f"x{i}" for i in range(len(OPS))])
    rewrite_part(part(trace_dir, "events"), lambda t: t.append_column("future_column", extra), version="1.7")
    with open_trace(trace_dir) as trace:
        assert columns(trace, "events") == TABLES["events"].names + ["rank", "future_column"]
        assert trace.sql("SELECT future_column FROM events ORDER BY seq")["future_column"].tolist() == extra.to_pylist()


# --- refusing damaged or incompatible traces -----------------------------------------------


def test_future_major_in_the_manifest_is_refused_naming_both_versions(trace_dir):
    manifest = trace_dir / layout.MANIFEST_NAME
    data = json.loads(manifest.read_text())
    data["schema_version"] = "2.0"
    manifest.write_text(json.dumps(data))
    with pytest.raises(SchemaVersionError) as caught:
        open_trace(trace_dir)
    message = str(caught.value)
    assert isinstance(caught.value, TraceError)
    assert "2.0" in message and SCHEMA_VERSION in message and str(manifest) in message and "\n" not in message


def test_malformed_version_in_the_manifest_is_refused_naming_the_file(trace_dir):
    manifest = trace_dir / layout.MANIFEST_NAME
    manifest.write_text(manifest.read_text().replace(f'"schema_version": "{SCHEMA_VERSION}"', '"schema_version": "banana"'))
    with pytest.raises(TraceError, match="banana") as caught:
        open_trace(trace_dir)
    assert str(manifest) in str(caught.value)


def test_future_major_inside_one_part_is_refused_naming_the_file(trace_dir):
    target = part(trace_dir, "tensors")
    rewrite_part(target, version="3.1")
    with pytest.raises(TraceError) as caught:
        open_trace(trace_dir)
    assert str(target) in str(caught.value) and "3.1" in str(caught.value) and SCHEMA_VERSION in str(caught.value)


def test_garbage_part_is_refused_naming_the_file(trace_dir):
    garbage = part(trace_dir, "events", index=1)
    garbage.write_bytes(b"this is not parquet at all" * 10)
    with open_trace(trace_dir) as trace:  # not committed: a leftover, never read
        assert any(str(garbage) in w and "not committed" in w for w in trace.warnings)
        assert trace.count("events") == len(OPS)
    recommit(garbage)
    with pytest.raises(TraceError, match="not a readable Parquet file") as caught:
        open_trace(trace_dir)
    assert str(garbage) in str(caught.value) and "\n" not in str(caught.value)


def test_part_truncated_to_half_is_refused_naming_the_file(trace_dir):
    target = part(trace_dir, "events")
    data = target.read_bytes()
    target.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceError) as caught:
        open_trace(trace_dir)
    assert str(target) in str(caught.value) and "\n" not in str(caught.value)


def test_part_of_another_table_is_refused_naming_the_file(trace_dir):
    stray = part(trace_dir, "modules", index=7)
    shutil.copy(part(trace_dir, "events"), stray)
    recommit(stray)
    with pytest.raises(TraceError, match="holds table 'events'") as caught:
        open_trace(trace_dir)
    assert str(stray) in str(caught.value)


def test_directory_without_manifest_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(TraceError, match="no manifest.json"):
        open_trace(tmp_path)
    with pytest.raises(FileNotFoundError):
        open_trace(tmp_path / "does-not-exist")


def test_manifest_of_another_format_is_refused(trace_dir):
    (trace_dir / layout.MANIFEST_NAME).write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(TraceError, match="not a spiketrace manifest"):
        open_trace(trace_dir)


def test_missing_table_in_a_complete_trace_is_an_error(trace_dir):
    shutil.rmtree(trace_dir / "modules")
    with pytest.raises(TraceError, match="missing") as caught:
        open_trace(trace_dir)
    assert str(layout.part_dir(trace_dir, "modules", 0)) in str(caught.value)


def test_missing_listed_part_in_a_complete_trace_is_an_error(tmp_path):
    root = tmp_path / "t"
    writer = TraceWriter(root, compact=False)  # parts stay as flushed
    fill(writer)
    writer.flush()
    add_event(writer, 99, "aten.sub.Tensor")
    writer.close()
    part(root, "events", index=0).unlink()  # events still has part 1
    with pytest.raises(TraceError, match="committed in the manifest, but missing") as caught:
        open_trace(root)
    assert str(part(root, "events", index=0)) in str(caught.value)


# --- crashed traces and leftovers ----------------------------------------------------------


def test_crashed_trace_opens_incomplete_with_every_flushed_row(tmp_path):
    root = tmp_path / "t"
    writer = TraceWriter(root, compact=False)  # parts stay as flushed
    fill(writer)
    writer.flush()
    add_event(writer, 50, "aten.sub.Tensor")
    writer.flush()
    add_event(writer, 51, "aten.mul.Tensor")  # buffered, never flushed: lost with the process
    with open_trace(root) as trace:
        assert trace.complete is False
        assert any("running" in warning for warning in trace.warnings)
        assert trace.sql("SELECT op FROM events ORDER BY seq")["op"].tolist() == OPS + ["aten.sub.Tensor"]
        assert trace.count("packed_inputs") == 0  # never flushed: no directory, reads as empty
        assert trace.sql("SELECT count(*) AS n FROM packed_inputs")["n"][0] == 0
        assert trace.validate() == []


def test_tmp_leftover_is_a_warning_and_not_read(trace_dir):
    leftover = part(trace_dir, "events", index=1).with_suffix(".parquet.tmp")
    leftover.write_bytes(b"half a part")
    with open_trace(trace_dir) as trace:
        assert any(str(leftover) in warning for warning in trace.warnings)
        assert trace.count("events") == len(OPS)
        assert trace.sql("SELECT count(*) AS n FROM events")["n"][0] == len(OPS)


# --- derived views -------------------------------------------------------------------------


def test_tensors_view_joins_freed_seq(trace_dir):
    with open_trace(trace_dir) as trace:
        rows = trace.arrow("SELECT uid, freed_seq FROM tensors ORDER BY uid").to_pylist()
    assert rows == [{"uid": uid, "freed_seq": FREES.get(uid)} for uid in sorted(TENSORS.values())]


def test_stages_view_pairs_begin_and_end(trace_dir):
    with open_trace(trace_dir) as trace:
        rows = trace.arrow("SELECT stage_id, name, phase, begin_seq, end_seq, b_index FROM stages ORDER BY stage_id")
    assert rows.to_pylist() == [
        {"stage_id": s, "name": n, "phase": p, "begin_seq": b, "end_seq": e, "b_index": 1 if "b1" in n else None}
        for s, n, p, b, e in STAGES
    ]


# --- validate ------------------------------------------------------------------------------


def test_validate_accepts_a_sound_trace(trace_dir):
    with open_trace(trace_dir) as trace:
        assert trace.validate() == []


def test_validate_detects_a_dangling_tensor_id(tmp_path):
    writer = TraceWriter(tmp_path / "t")
    fill(writer)
    writer.tables["event_tensors"].append(seq=2, k=0, role="arg", position=0, name=None, item=None, tensor_id=999)
    writer.close()
    with open_trace(tmp_path / "t") as trace:
        problems = trace.validate()
    assert len(problems) == 1
    assert "event_tensors.tensor_id" in problems[0] and "999" in problems[0]


def test_validate_detects_repeated_seq_and_dangling_scope_and_module(tmp_path):
    writer = TraceWriter(tmp_path / "t")
    fill(writer)
    add_event(writer, 1, "aten.add.Tensor", scope_id=77)  # seq 1 again, and no scope 77
    writer.tables["module_events"].append(
        seq=3, kind="forward_post", module_id=42, tracker_name="x", call_index=0, step=0, stage_id=None,
        stage="unlabeled", phase=None, grad_enabled=True, training=True, thread=0,
    )
    writer.close()
    with open_trace(tmp_path / "t") as trace:
        problems = trace.validate()
    assert any(p.startswith("events.(seq)") for p in problems)
    assert any(p.startswith("events.scope_id") and "77" in p for p in problems)
    assert any(p.startswith("module_events.module_id") and "42" in p for p in problems)
    # the repeated seq also breaks the record order, named by file, column and row
    assert any("events/rank=0/part-00000.parquet: column seq, row" in p and "out of order" in p for p in problems)
    assert len(problems) == 4


def test_validate_detects_counts_that_disagree_with_the_manifest(trace_dir):
    manifest = trace_dir / layout.MANIFEST_NAME
    data = json.loads(manifest.read_text())
    data["counts"]["events"] = len(OPS) + 1
    manifest.write_text(json.dumps(data))
    with open_trace(trace_dir) as trace:
        assert trace.validate() == [f"events rank 0: the manifest counts {len(OPS) + 1} rows, the parts hold {len(OPS)}"]


def test_summary_counts(tmp_path):
    write_trace(tmp_path / "t")
    with open_trace(tmp_path / "t") as trace:
        summary = trace.summary()
    assert summary["status"] == "complete" and summary["schema_version"] == SCHEMA_VERSION
    assert summary["metadata"] == {"run": "test"}
    assert summary["counts"] == {
        "events": len(OPS), "ops": len(set(OPS)), "modules": 2, "stages": len(STAGES), "ranks": 1, "optimizer_steps": 1,
    }


# --- no torch ------------------------------------------------------------------------------


def test_analyze_never_imports_torch(trace_dir):
    script = textwrap.dedent(
        f"""
        import sys

        class NoTorch:
            def find_spec(self, name, path=None, target=None):
                if name == "torch" or name.startswith("torch."):
                    raise ImportError("torch is blocked in this test")
                return None

        sys.meta_path.insert(0, NoTorch())
        from spiketrace.analyze import open_trace
        import spiketrace.analyze.cli
        with open_trace({str(trace_dir)!r}) as trace:
            print(trace.sql("SELECT count(*) AS n FROM events")["n"][0])
        assert "torch" not in sys.modules, "torch was imported"
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(len(OPS))


def test_trace_repr_and_context_manager(trace_dir):
    with open_trace(trace_dir) as trace:
        assert isinstance(trace, Trace) and "ranks [0]" in repr(trace)


def test_each_opened_trace_spills_to_its_own_capped_directory_removed_on_close(tmp_path):
    root = tmp_path / "t"
    writer = TraceWriter(root, compact=False)  # parts stay as flushed
    fill(writer)
    writer.close()
    with open_trace(root, max_temp_size="64MB") as trace:
        spill = trace.con.execute("SELECT current_setting('temp_directory')").fetchone()[0]
        assert os.path.isdir(spill) and str(os.getpid()) in os.path.basename(spill)
        assert trace.con.execute("SELECT current_setting('max_temp_directory_size')").fetchone()[0] == "61.0 MiB"
        with open_trace(root) as other:  # another reader of the same trace: another directory
            assert other.con.execute("SELECT current_setting('temp_directory')").fetchone()[0] != spill
    assert not os.path.exists(spill)


def test_spill_directories_of_killed_readers_are_removed_by_the_next_reader(trace_dir, tmp_path, monkeypatch):
    # `spiketrace sql` killed with SIGKILL cannot remove its spill directory; the next reader
    # removes the directories whose owning process no longer runs, and only those.
    import tempfile

    from spiketrace.analyze.trace.reader import SPILL_PREFIX

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    orphan = tmp_path / f"{SPILL_PREFIX}{dead.stdout.strip()}-abc"
    alive = tmp_path / f"{SPILL_PREFIX}{os.getpid()}-def"
    for directory in (orphan, alive):
        directory.mkdir()
        (directory / "duckdb_temp_block-1.block").write_bytes(b"x" * 100)
    with open_trace(trace_dir):
        assert not orphan.exists() and alive.exists()


def test_ranks_opens_a_shard_of_a_multi_rank_trace(tmp_path):
    write_trace(tmp_path / "t", rank=0, world_size=2, ops=OPS)
    write_trace(tmp_path / "t", rank=1, world_size=2, ops=OPS[:2])
    with open_trace(tmp_path / "t", ranks=[1]) as shard:
        assert shard.ranks == [1] and shard.count("events") == 2 and shard.validate() == []
        assert not shard.changed_since_open()  # re-read as opened: rank 1 only
        assert not any("world size" in warning for warning in shard.warnings)
    with pytest.raises(TraceError, match="no rank 5"):
        open_trace(tmp_path / "t", ranks=[5])
