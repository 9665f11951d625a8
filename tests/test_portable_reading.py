"""Opening a trace where POSIX's file flags and user ids are missing (a Windows laptop).

Windows has no O_NONBLOCK (and os.set_blocking works on pipes only from Python 3.12), no
O_NOFOLLOW and no os.getuid; os.kill(pid, 0) there sends a Ctrl+C. The reader must open,
check and count a trace without any of them; the tests take them away and do exactly that.
"""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from spiketrace.analyze import energy, open_trace
from spiketrace.analyze.cli import main
from spiketrace.analyze.counters import counts
from spiketrace.analyze.trace import spill
from spiketrace.schemas import safe_files


@pytest.fixture
def demo_trace(tmp_path):
    from spiketrace.capture.session.example import record_demo

    return record_demo(tmp_path / "trace")


def test_a_trace_opens_validates_and_counts_without_posix_flags(demo_trace, monkeypatch):
    monkeypatch.setattr(safe_files, "_NONBLOCK", 0)
    monkeypatch.setattr(safe_files, "_READ_FLAGS", os.O_RDONLY)
    monkeypatch.delattr(os, "set_blocking")
    monkeypatch.delattr(os, "getuid")
    with open_trace(demo_trace) as trace:
        assert trace.validate() == []
        assert len(counts(trace)) > 0
        assert energy(trace, "neuromc").energy_total_pj > 0
    # and the CLI a laptop user runs
    for command in (["validate"], ["counts"], ["energy"], ["info"]):
        result = CliRunner().invoke(main, [command[0], str(demo_trace)])
        assert result.exit_code == 0, (command, result.output)


def test_orphan_spill_directories_are_left_alone_without_user_ids(tmp_path, monkeypatch):
    # A directory named as a dead reader's (pid 0 never runs a reader) is removed on POSIX...
    (tmp_path / "spill-999999999-x").mkdir()
    if hasattr(os, "getuid") and os.name != "nt":
        assert spill.remove_orphans("spill-", tmp_path) == [str(tmp_path / "spill-999999999-x")]
    # ...and left for the system's cleanup where there are no user ids (nor a safe signal 0)
    (tmp_path / "spill-999999999-y").mkdir()
    monkeypatch.delattr(os, "getuid")
    assert spill.remove_orphans("spill-", tmp_path) == []
    assert (tmp_path / "spill-999999999-y").is_dir()
