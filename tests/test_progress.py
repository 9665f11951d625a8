"""Progress bars: the long commands draw one on a terminal, and never into
a pipe or a file, so captured output holds no carriage-return frames (tqdm's disable=None).

On a terminal is checked under a pseudo-terminal (python's pty module) with a window size
set: a fresh pty is 0 columns wide, and tqdm draws nothing into a zero-width terminal."""

from __future__ import annotations

import fcntl
import os
import pty
import shutil
import struct
import subprocess
import termios
from pathlib import Path

import pytest

from tests.training_runs import record, record_ranks

BAR = "%|"  # what every tqdm frame holds: the percentage, then the bar


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    return record(tmp_path_factory.mktemp("progress") / "train", 1)


def on_a_terminal(*args: str) -> tuple[int, str]:
    """Run `spiketrace *args` with stdin, stdout and stderr a pseudo-terminal 100 columns wide;
    its exit code and everything it wrote there."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    process = subprocess.Popen(["spiketrace", *args], stdin=terminal, stdout=terminal, stderr=terminal, close_fds=True)
    os.close(terminal)
    written = bytearray()
    while True:
        try:
            chunk = os.read(controller, 4096)
        except OSError:  # EIO: every writer closed the terminal
            break
        if not chunk:
            break
        written += chunk
    os.close(controller)
    return process.wait(timeout=300), written.decode(errors="replace")


def test_no_progress_in_captured_output(trace, tmp_path):
    for args in (["plot", trace, "stages", "--out", tmp_path / "s.png"],
                 ["report", trace, "--out", tmp_path / "r.html"],
                 ["recost", trace, "--model", "compute", "--preset", "compute-fp32-45nm",
                  "--preset", "compute-int8-45nm", "--out", tmp_path / "r.csv"]):
        done = subprocess.run(["spiketrace", *map(str, args)], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert BAR not in done.stderr and "\r" not in done.stderr + done.stdout, args
        assert done.stdout.startswith("wrote ")


def test_progress_on_a_terminal(trace, tmp_path):
    code, shown = on_a_terminal("plot", str(trace), "stages", "--out", str(tmp_path / "s.png"))
    assert code == 0, shown
    assert "plot:" in shown and BAR in shown and "\r" in shown  # frames redrawn in place
    assert shown.rstrip().endswith(f"wrote {tmp_path / 's.png'}")  # the bar is cleared before the result


def test_progress_over_several_traces_on_a_terminal(trace, tmp_path):
    copy = shutil.copytree(trace, tmp_path / "copy")
    code, shown = on_a_terminal("counts", str(trace), str(copy), "--counter", "flop")
    assert code == 0, shown
    assert "traces:" in shown and BAR in shown
    captured = subprocess.run(["spiketrace", "counts", str(trace), str(copy), "--counter", "flop"],
                              capture_output=True, text=True, timeout=300)
    assert captured.returncode == 0 and "traces:" not in captured.stderr and BAR not in captured.stderr


def test_progress_over_the_chunks_of_one_trace_on_a_terminal(tmp_path):
    # Two ranks are two chunks of events at least: the counters draw a bar over them.
    trace = record_ranks(tmp_path / "ranks", 1)
    code, shown = on_a_terminal("counts", str(trace), "--counter", "flop")
    assert code == 0, shown
    assert "counting:" in shown and BAR in shown
    captured = subprocess.run(["spiketrace", "counts", str(trace), "--counter", "flop"],
                              capture_output=True, text=True, timeout=300)
    assert captured.returncode == 0 and "counting:" not in captured.stderr and BAR not in captured.stderr
