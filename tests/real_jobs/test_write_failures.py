"""The trace directory fills up (a tiny tmpfs) or refuses large files (RLIMIT_FSIZE) in the
middle of training: the job must finish bit-identical to an uncaptured one, the manifest must
say `failed` naming the file, and every part it lists must be readable and consistent."""

from __future__ import annotations

import json
import resource
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from tests.real_jobs.tracefiles import manifests, reference_problems, run_job


def assert_failed_cleanly(job: subprocess.CompletedProcess, trace: Path, result: Path, errno_text: str) -> None:
    assert job.returncode == 0, job.stderr[-3000:]
    outcome = json.loads(result.read_text())
    assert outcome["losses"] == outcome["twin_losses"] and outcome["parameters_identical"]
    manifest = manifests(trace)[0]
    assert manifest["status"] == "failed"
    [writer] = [entry for entry in manifest["degraded"] if entry["site"] == "writer"]
    assert str(trace) in writer["what"] and str(trace) in writer["error"] and errno_text in writer["error"]
    assert errno_text in manifest["error"] and str(trace) in manifest["error"]
    # One warning, naming the trace and the file.
    warnings = [line for line in job.stderr.splitlines() if "spiketrace: capture into" in line]
    assert len(warnings) == 1 and writer["what"] in warnings[0]
    # Some parts were committed before the failure; all of them read back whole.
    assert manifest["counts"]["events"] > 0
    assert not reference_problems(trace)
    leftovers = [p for p in trace.rglob("*") if p.is_file() and p.name.endswith(".tmp")]
    assert leftovers == []


def _mount_tmpfs(where: Path, size: str) -> bool:
    if shutil.which("mount") is None:
        return False
    where.mkdir()
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True).returncode == 0


def test_disk_full_mid_run(tmp_path):
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, "256k"):
        pytest.skip("cannot mount a tmpfs here (needs root); the file-size limit test covers the same path")
    try:
        job = run_job("write_failure.py", disk / "trace", tmp_path / "result.json")
        assert_failed_cleanly(job, disk / "trace", tmp_path / "result.json", "No space left on device")
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def _limit_file_size() -> None:  # in the child: a write past 24 KiB fails with EFBIG
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (24 << 10, 24 << 10))


def test_file_size_limit_mid_run(tmp_path):
    job = run_job("write_failure.py", tmp_path / "trace", tmp_path / "result.json", preexec_fn=_limit_file_size)
    assert_failed_cleanly(job, tmp_path / "trace", tmp_path / "result.json", "File too large")
