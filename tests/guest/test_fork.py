"""A process forked while a Recorder is open records nothing and never touches the parent's
trace (capture/session/forks.py); the parent's trace comes out complete, with all of its own ops.

Each program (tests/guest/programs/fork_*.py) runs plain and under capture (harness.compare:
what the user sees is the same, the trace validates and counts). The children run an op the
parent never runs (cosh) and the parent runs one they never run (sinh), so the trace shows
whose ops it holds; the parent's forwards are counted by their addmm events (a Linear of a
2-d input is t + addmm). The programs write the pids to `captured.pkl.pids`. A first test
forks a bare TraceWriter: its pid check alone keeps a child from writing.
"""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

from spiketrace.analyze import open_trace
from spiketrace.capture.store.writer import TraceWriter
from tests.guest.harness import compare


def _files(root: Path) -> dict[str, bytes]:
    return {path.relative_to(root).as_posix(): path.read_bytes() for path in root.rglob("*") if path.is_file()}


def _committed(manifest: dict) -> set[str]:
    return {entry["path"] for entries in manifest["parts"].values() for entry in entries} | {"manifest.json"}


def test_a_forked_writer_writes_nothing(tmp_path):
    """A child of the process that created the writer: flush and close (compaction included)
    change no file, and a direct manifest write raises rather than pretend to commit. The
    parent then writes, compacts and closes as if no child had been."""
    writer = TraceWriter(tmp_path / "t")
    frees = writer.tables["tensor_frees"]
    frees.append(uid=1, freed_seq=1)
    assert writer.flush()  # part 0
    frees.append(uid=2, freed_seq=2)  # buffered at the fork: the child must not write it
    before = _files(tmp_path / "t")
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            frees.append(uid=3, freed_seq=3)
            flushed = writer.flush()
            writer.close()
            try:
                writer.write_manifest()
            except RuntimeError:
                code = 0 if not flushed and _files(tmp_path / "t") == before else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert _files(tmp_path / "t") == before
    frees.append(uid=4, freed_seq=4)
    assert writer.flush()  # part 1: the name the child would have taken
    writer.close()
    manifest = json.loads((tmp_path / "t" / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["counts"]["tensor_frees"] == 3
    assert set(_files(tmp_path / "t")) == _committed(manifest)


def _pids(tmp_path: Path) -> dict[str, list[int]]:
    """role -> pids, from the "ROLE PID" lines the captured run wrote."""
    roles: dict[str, list[int]] = {}
    for line in (tmp_path / "captured.pkl.pids").read_text().splitlines():
        role, pid = line.split()
        roles.setdefault(role, []).append(int(pid))
    return roles


def _check_parent_trace(tmp_path: Path, manifest: dict, stderr: str, *, children: int, forwards: int,
                        sinh: int, steps: set[int], child_only: tuple[str, ...] = ("aten.cosh.default",)) -> dict:
    trace = tmp_path / "trace"
    roles = _pids(tmp_path)
    assert len(roles["child"]) == children
    assert manifest["status"] == "complete" and manifest["counts"]["events"] > 0
    assert manifest["forked_children"] == children
    assert manifest["degraded"] == [] and "degraded" not in stderr, stderr[-3000:]
    # Only the manifest and the parts it commits: no child left a part, a temporary or a manifest.
    files = set(_files(trace))
    assert files == _committed(manifest)
    assert not [name for name in files for pid in roles["child"] if str(pid) in name]
    with open_trace(trace) as opened:
        ops = opened.sql("SELECT op, count(*) AS n FROM events GROUP BY op")
        recorded_steps = set(opened.sql("SELECT DISTINCT step FROM events")["step"])
    count = dict(zip(ops["op"], ops["n"]))
    assert count.get("aten.addmm.default") == 2 * forwards  # every forward of the parent, no child's
    assert count.get("aten.sinh.default") == sinh  # the parent's ops after the fork
    assert not [op for op in child_only if op in count]  # none of the children's
    assert recorded_steps == steps
    return roles


def test_os_fork_child_exits_with_os_exit(tmp_path):
    """(a) The child runs 20 forwards and cosh, then os._exit(0); the parent runs one forward
    before the fork, one after (and sinh), and one in a second step."""
    manifest, stderr = compare("fork_os", tmp_path)
    _check_parent_trace(tmp_path, manifest, stderr, children=1, forwards=3, sinh=1, steps={0, 1})
    seen = pickle.loads((tmp_path / "captured.pkl").read_bytes())
    assert seen["child_exit"] == 0


def test_os_fork_child_leaves_the_recorder_block(tmp_path):
    """(b) The child goes through the rest of the `with` block (three stages and steps, cosh),
    its copy of the Recorder's __exit__ runs, and it ends with sys.exit(0): the parent's files
    stay as they are, and on_trace_ready is called in the parent only."""
    manifest, stderr = compare("fork_through_block", tmp_path)
    roles = _check_parent_trace(tmp_path, manifest, stderr, children=1, forwards=4, sinh=3, steps={0, 1, 2})
    assert roles["ready"] == roles["parent"]
    seen = pickle.loads((tmp_path / "captured.pkl").read_bytes())
    assert seen["child_exit"] == 0


def test_dataloader_fork_workers(tmp_path):
    """(c) Two epochs of a DataLoader with two fork-started workers (four forks), iterated in a
    recorded stage: 24 items in batches of 4, so 12 forwards (and sinh) in the parent; the
    workers' __getitem__ ops (cosh, tanh) are not in the trace."""
    manifest, stderr = compare("fork_dataloader", tmp_path)
    _check_parent_trace(tmp_path, manifest, stderr, children=4, forwards=12, sinh=12, steps={0, 1},
                        child_only=("aten.cosh.default", "aten.tanh.default"))
