"""Capturing into, and reading from, directories someone prepared with links and special files
nothing outside the trace is touched (a victim directory's checksums are equal
before and after), capture refuses with a one-line TracePathError naming what it found, and
the analysis refuses links inside a trace instead of following them into another one."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest
import torch

from spiketrace.analyze import TraceError, open_trace
from spiketrace.capture import Recorder
from spiketrace.capture.store.writer import TracePathError
from spiketrace.schemas import layout


def snapshot(directory: Path) -> dict[str, str]:
    """relative path -> BLAKE2b of every file below `directory` (links recorded as such)."""
    found = {}
    for path in sorted(directory.rglob("*")):
        key = path.relative_to(directory).as_posix()
        if path.is_symlink():
            found[key] = "link -> " + os.readlink(path)
        elif path.is_file():
            found[key] = hashlib.blake2b(path.read_bytes()).hexdigest()
        else:
            found[key] = "directory"
    return found


@pytest.fixture
def victim(tmp_path):
    victim = tmp_path / "victim"
    (victim / "rank=0").mkdir(parents=True)
    (victim / "precious.txt").write_text("do not touch")
    (victim / "rank=0" / "part-00000.parquet").write_bytes(b"someone else's data")
    return victim


def link_table_directory(root, victim):
    root.mkdir()
    (root / "events").symlink_to(victim, target_is_directory=True)


def link_rank_directory(root, victim):
    (root / "events").mkdir(parents=True)
    (root / "events" / "rank=0").symlink_to(victim / "rank=0", target_is_directory=True)


def link_part(root, victim):
    (root / "events" / "rank=0").mkdir(parents=True)
    (root / "events" / "rank=0" / "part-00000.parquet").symlink_to(victim / "precious.txt")


def link_manifest(root, victim):
    root.mkdir()
    (root / "manifest.json").symlink_to(victim / "precious.txt")


def link_manifest_temporary(root, victim):
    root.mkdir()
    (root / "manifest.json.tmp").symlink_to(victim / "precious.txt")


def foreign_file_among_parts(root, victim):
    (root / "events" / "rank=0").mkdir(parents=True)
    shutil.copy(victim / "precious.txt", root / "events" / "rank=0" / "notes.txt")


def garbage_manifest_of_another_rank(root, victim):
    root.mkdir()
    (root / "manifest.rank=3.json").write_text("garbage")
    shutil.copy(victim / "precious.txt", root / "precious.txt")


def fifo_as_manifest_of_another_rank(root, victim):
    root.mkdir()
    os.mkfifo(root / "manifest.rank=1.json")


PREPARED = [link_table_directory, link_rank_directory, link_part, link_manifest, link_manifest_temporary,
            foreign_file_among_parts, garbage_manifest_of_another_rank, fifo_as_manifest_of_another_rank]


@pytest.mark.parametrize("prepare", PREPARED, ids=lambda f: f.__name__)
def test_capture_into_a_prepared_directory_touches_nothing_outside(tmp_path, victim, prepare):
    root = tmp_path / "trace"
    prepare(root, victim)
    before = snapshot(victim)
    model = torch.nn.Linear(4, 2)
    with pytest.raises(TracePathError) as refused:
        with Recorder(root, model=model) as recorder, recorder.stage("forward"):
            model(torch.ones(1, 4))
    message = str(refused.value)
    assert "\n" not in message and str(root) in message
    assert snapshot(victim) == before


def test_a_trace_after_a_refused_start_is_written_in_a_clean_directory(tmp_path, victim):
    # The refusal is for the prepared directory only: the same job into a new path works.
    model = torch.nn.Linear(4, 2)
    with Recorder(tmp_path / "fresh", model=model) as recorder, recorder.stage("forward"):
        model(torch.ones(1, 4))
    with open_trace(tmp_path / "fresh") as trace:
        assert trace.validate() == [] and trace.count("events") > 0


def _trace(root: Path, scale: float) -> Path:
    model = torch.nn.Linear(4, 2)
    with Recorder(root, model=model) as recorder, recorder.stage("forward"):
        model(torch.full((3, 4), scale))
    return root


def test_the_analysis_refuses_a_part_linked_into_another_trace(tmp_path):
    mine, other = _trace(tmp_path / "mine", 1.0), _trace(tmp_path / "other", 2.0)
    part = layout.part_dir(mine, "tensors", 0) / layout.part_name(0)
    part.unlink()
    part.symlink_to(layout.part_dir(other, "tensors", 0) / layout.part_name(0))
    with pytest.raises(TraceError, match="symbolic link") as refused:
        open_trace(mine)
    assert str(part) in str(refused.value)
    table_dir = mine / "events"
    shutil.rmtree(table_dir)
    table_dir.symlink_to(other / "events", target_is_directory=True)
    with pytest.raises(TraceError, match="trace directories must be real directories"):
        open_trace(mine, verify=False)


def test_stale_shards_of_an_older_run_are_refused_naming_them(tmp_path):
    """A 2-rank run, then a 1-process run into the same root: rank 1 is the older run's."""
    root = tmp_path / "t"
    model = torch.nn.Linear(4, 2)
    for rank in (0, 1):
        with Recorder(root, model=model, rank=rank, world_size=2, run_id="older") as recorder, recorder.stage("forward"):
            model(torch.ones(1, 4))
    with Recorder(root, model=model, run_id="newer-run") as recorder, recorder.stage("forward"):
        model(torch.ones(2, 4))
    with pytest.raises(TraceError, match=r"ranks \[1\] are stale \(run older") as refused:
        open_trace(root)
    assert "--run" in str(refused.value) and "\n" not in str(refused.value)
    with open_trace(root, run="newer") as trace:  # a unique prefix picks a run
        assert trace.ranks == [0] and trace.validate() == []
        assert any("ignored run older" in warning for warning in trace.warnings)
    with open_trace(root, run="older") as older:
        assert older.ranks == [1]
