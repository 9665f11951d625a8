"""Run a guest program plain and under capture in fresh processes; compare what the user sees.

`compare(name, tmp_path)` runs tests/guest/programs/<name>.py twice, as `python program.py`,
once plain and once with SPIKETRACE_GUEST_TRACE set (tests/guest/user.py), and asserts:
- neither run died of a signal (a capture segfault kills only its subprocess, not the suite);
- both exited the same way, with the same last line of stderr when they failed;
- every value the program reported is equal (NaN equal to NaN, -0.0 to itself);
- the capture left a trace that validates and counts, whose `degraded` entries (if any) each
  name the op or hook they come from.
It returns the trace's manifest and the captured run's stderr for further checks.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROGRAMS = Path(__file__).with_name("programs")


def run(name: str, out: Path, trace: Path | None, timeout: float = 180,
        env: dict | None = None) -> tuple[subprocess.CompletedProcess, dict]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "SPIKETRACE_GUEST_OUT": str(out), **(env or {})}
    env.pop("SPIKETRACE_GUEST_TRACE", None)
    if trace is not None:
        env["SPIKETRACE_GUEST_TRACE"] = str(trace)
    done = subprocess.run([sys.executable, str(PROGRAMS / f"{name}.py")], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)
    seen = pickle.loads(out.read_bytes()) if out.exists() else {}
    return done, seen


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def check_trace(trace: Path, *, counts: bool = True) -> dict:
    """The trace validates and counts; every degraded entry names where it came from."""
    from spiketrace.analyze import open_trace
    from spiketrace.analyze.counters import counts as count

    manifest = json.loads((trace / "manifest.json").read_text()) if (trace / "manifest.json").exists() else None
    if manifest is None:
        found = sorted(trace.glob("manifest*.json"))
        assert found, f"{trace}: no manifest"
        manifest = json.loads(found[0].read_text())
    assert manifest.get("status") == "complete", manifest.get("status")
    for entry in manifest.get("degraded", []):
        assert entry["what"] and entry["site"], entry
    opened = open_trace(trace)
    try:
        assert opened.validate() == []
        if counts:
            count(opened)
    finally:
        close = getattr(opened, "close", None)
        if close is not None:
            close()
    return manifest


def compare(name: str, tmp_path: Path, *, counts: bool = True, env: dict | None = None) -> tuple[dict, str]:
    """`env`: extra environment of both runs (e.g. SPIKETRACE_SLOW_PATHS=all for the Python
    record path)."""
    plain, plain_seen = run(name, tmp_path / "plain.pkl", None, env=env)
    trace = tmp_path / "trace"
    captured, captured_seen = run(name, tmp_path / "captured.pkl", trace, env=env)
    assert plain.returncode >= 0, f"the plain run died of signal {-plain.returncode}: {plain.stderr[-2000:]}"
    assert captured.returncode >= 0, f"the captured run died of signal {-captured.returncode}: {captured.stderr[-2000:]}"
    assert captured.returncode == plain.returncode, (plain.stderr[-2000:], captured.stderr[-2000:])
    if plain.returncode:
        assert last_line(captured.stderr) == last_line(plain.stderr)
    assert plain_seen, f"{name} reported nothing: {plain.stderr[-2000:]}"
    differing = sorted(k for k in plain_seen.keys() | captured_seen.keys()
                       if not same(plain_seen.get(k), captured_seen.get(k)))
    assert not differing, f"{name}: the captured run differs in {differing}: {captured.stderr[-3000:]}"
    manifest = check_trace(trace, counts=counts)
    return manifest, captured.stderr
