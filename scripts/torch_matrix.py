"""Capture on every torch the package declares: install a built wheel beside each torch and run
the capture-faithfulness tests and the trace digests there.

    python -m build --wheel --outdir dist
    python scripts/torch_matrix.py --wheel dist/spiketrace-*.whl                  # every version
    python scripts/torch_matrix.py --versions 2.4.1 2.14.1 --wheel dist/spiketrace-*.whl --quick   # CI

For each torch version: a virtual environment under --venvs (reused when it already holds that
torch) gets `pip install torch==X` from the package index as pip is configured, the wheel
(non-editable, reinstalled every run) and the test dependencies; SpikingJelly 2.0.0, snnTorch
1.0.0 and NeuroBench 2.3.0 go in with --no-deps, as the README installs them. Then, from a
working directory outside the repository:

- a probe says which spiketrace the environment imports (it must be the installed wheel, even
  with the repository on sys.path, as pytest puts it there), whether SpikingJelly 2.0.0 imports
  on this torch (2.0.0 needs torch.library.triton_op, which torch 2.4 lacks), whether two
  stacked dispatch modes are handed the same ops, and what a capture's manifest lists under
  `torch_limitations`;
- the chosen tests of this repository run with that environment's Python (QUICK_TESTS, and
  FULL_TESTS without --quick), each where its torch has what it needs (SpikingJelly imports;
  two stacked dispatch modes are handed the same ops, as the probe finds out);
- scripts/trace_digest.py (the zoo: needs SpikingJelly) gives one digest per (model, table),
  compared with the reference torch's (--reference, 2.13.0: the torch the project pins);
- the demo and every command on its trace, as tests/test_installed_wheel.py runs them, with
  the environment's own `spiketrace` (the "commands ok" column).

A table follows: torch | install s | tests s | tests passed/failed | commands ok | digests
equal to the reference | notes. The exit status is nonzero if any version's install, tests or
commands failed; digests that differ are reported, not failed: torch itself dispatches other
ops from version to version (docs/design.md, "torch versions").
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_VERSIONS = ("2.4.1", "2.6.0", "2.8.0", "2.10.0", "2.12.1", "2.13.0", "2.14.1")
REFERENCE = "2.13.0"

# What the tests import beyond the wheel's own dependencies; the model libraries without their
# dependencies (their pins name torchvision and torchaudio builds of one torch of their own).
TEST_DEPENDENCIES = ("pytest", "hypothesis", "numpy", "loguru", "packaging")
NO_DEPS = ("spikingjelly==2.0.0", "snntorch==1.0.0", "neurobench==2.3.0")

# The tests, each with what it needs of the torch it runs on: "spikingjelly" (SpikingJelly 2.0.0
# imports: the zoo and SpikingJelly's counters and tracker as the reference) and "stacked modes"
# (two stacked dispatch modes are handed the same ops: the test stacks a reference mode with the
# recorder; torch 2.8 and older hand the lower mode ops the upper one never sees, docs/design.md
# "torch versions"). A test is left out, and the table says why, where its torch lacks a need.
# The quick set: the Dynamo guard, the older-torch fallbacks (simulated, and recomputation told
# on this torch), a capture that fails or is misused, NeuroBench's own numbers on snnTorch
# models, the compiled record against the Python one, checkpointing against a probe mode, every
# column against a reference mode, and module scopes against SpikingJelly's tracker.
QUICK_TESTS = {
    "tests/test_dynamo_guard.py": (),
    "tests/test_older_torch.py": (),
    "tests/test_capture_robustness.py": (),
    "tests/test_neurobench_metrics.py": (),
    "tests/test_native.py": ("spikingjelly",),
    "tests/real_jobs/test_checkpointing.py": ("stacked modes",),
    "tests/test_roundtrip.py": ("spikingjelly", "stacked modes"),
    "tests/test_scopes.py": ("spikingjelly", "stacked modes"),
}
FULL_TESTS = {
    "tests/test_stages_and_schedules.py": (),
    "tests/test_argument_encoding.py": (),
    "tests/test_bad_ops_rows.py": (),
    "tests/test_propagation_twins.py": (),
    "tests/test_native_reads.py": (),
    "tests/test_native_statistics.py": (),
    "tests/real_jobs/test_storage_flags.py": (),
    "tests/real_jobs/test_inference_mode.py": ("spikingjelly",),
    "tests/real_jobs/test_conv_forms.py": ("spikingjelly",),
    "tests/test_fast_paths.py": ("spikingjelly",),
    "tests/test_device_path.py": ("spikingjelly",),
    "tests/test_sj_neuron_ops.py": ("spikingjelly",),
    "tests/real_jobs/test_loss_module.py": ("spikingjelly", "stacked modes"),
    "tests/test_counters_differential.py": ("spikingjelly", "stacked modes"),
    "tests/test_neuromc_differential.py": ("spikingjelly", "stacked modes"),
    "tests/test_nmac_differential.py": ("spikingjelly", "stacked modes"),
}
# Tests inside the files above that need a library not installed here (Norse), or SpikingJelly
# in a file that otherwise does without it: left out by name (pytest -k).
NEVER = ("norse",)
WITHOUT_SPIKINGJELLY = ("spikingjelly", "native_multi_step_run", "counts_samples_option")
TEST_TIMEOUT_S = 1800

PYTEST_INI = """[pytest]
markers =
    slow: multi-process real jobs, fuzzing and the local Dask cluster
"""

# Run in the environment, from the working directory, with the repository first on sys.path
# as pytest and scripts/trace_digest.py put it: which spiketrace is imported, whether
# SpikingJelly runs, what a capture of a tiny model lists as torch_limitations and how it tells
# recomputation, and whether two stacked dispatch modes are handed the same ops.
PROBE = r"""
import json, sys, tempfile, pathlib
sys.path.insert(0, sys.argv[1])
import torch
import spiketrace.capture
from spiketrace.capture import Recorder
from spiketrace.capture.modules import recomputation
found = {"torch": torch.__version__, "spiketrace": spiketrace.capture.__file__}
try:  # imported and run, as the zoo runs it (SpikingJelly 2.0.0 on torch 2.4 fails at the first step)
    from spikingjelly.activation_based import functional, layer, neuron, surrogate
    neuron.IFNode()(torch.rand(2, 3))
    found["spikingjelly"] = None
except Exception as exc:
    found["spikingjelly"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
net = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU())
with tempfile.TemporaryDirectory() as directory:
    path = pathlib.Path(directory) / "trace"
    with Recorder(path, model=net):
        net(torch.ones(2, 3, requires_grad=True)).sum().backward()
    manifest = json.loads((path / "manifest.json").read_text())
found["limitations"] = manifest.get("torch_limitations")
found["degraded"] = manifest.get("degraded")
found["recomputation"] = recomputation.method
from torch.utils._python_dispatch import TorchDispatchMode
class Seen(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))
x = torch.ones(2, requires_grad=True)
with Seen() as lower, Seen() as upper:
    (x.detach() * x).sum().backward()
found["stacked_modes"] = lower.ops == upper.ops
print(json.dumps(found))
"""


@dataclass
class Result:
    version: str
    install_s: float | None = None
    reused: bool = False
    tests_s: float | None = None
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    wall_s: float | None = None
    spikingjelly_runs: bool | None = None
    digests: dict[str, str] = field(default_factory=dict)
    commands: tuple[int, int] | None = None  # (succeeded, run) of the demo and every command on its trace
    notes: list[str] = field(default_factory=list)
    ok: bool = True


def run(command: list[str], timeout: float | None = None, **options) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, **options)


def venv_python(venvs: Path, version: str) -> Path:
    return venvs / f"torch-{version}" / "bin" / "python"


def installed_torch(python: Path) -> str | None:
    if not python.exists():
        return None
    found = run([str(python), "-c", "import torch; print(torch.__version__)"])
    return found.stdout.strip().split("+")[0] if found.returncode == 0 else None


def pip(python: Path, *arguments: str) -> None:
    done = run([str(python), "-m", "pip", "install", "--quiet", *arguments])
    if done.returncode != 0:
        raise RuntimeError(f"pip install {' '.join(arguments)} failed:\n{done.stderr[-3000:]}")


def prepare(venvs: Path, version: str, wheel: Path, result: Result) -> Path:
    """The environment of torch `version` with the wheel and the test dependencies in it."""
    python = venv_python(venvs, version)
    started = time.perf_counter()
    if installed_torch(python) == version:
        result.reused = True
    else:
        made = run([sys.executable, "-m", "venv", "--clear", str(python.parent.parent)])
        if made.returncode != 0:
            raise RuntimeError(f"venv failed: {made.stderr[-2000:]}")
        pip(python, f"torch=={version}")
    pip(python, str(wheel), *TEST_DEPENDENCIES)  # the wheel's dependencies (a reused environment has them)
    pip(python, "--no-deps", *NO_DEPS)
    pip(python, "--no-deps", "--force-reinstall", str(wheel))  # this wheel, even over one of the same version
    result.install_s = time.perf_counter() - started
    return python


def probe(python: Path, work: Path) -> dict:
    done = run([str(python), "-c", PROBE, str(REPO)], cwd=work, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"the probe failed:\n{done.stderr[-3000:]}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    environment = str(python.parent.parent.resolve())
    if not str(Path(found["spiketrace"]).resolve()).startswith(environment):
        raise RuntimeError(f"the tests would import {found['spiketrace']}, not the wheel installed in {environment}")
    return found


def run_tests(python: Path, work: Path, tests: list[str], deselected: tuple[str, ...], result: Result) -> None:
    report = work / f"junit-{result.version}.xml"
    command = [str(python), "-m", "pytest", "-q", "-m", "", "-p", "no:cacheprovider", "-c", str(work / "pytest.ini"),
               "--rootdir", str(REPO), f"--junitxml={report}", *(str(REPO / test) for test in tests)]
    if deselected:
        command += ["-k", " and ".join(f"not {name}" for name in deselected)]
    started = time.perf_counter()
    environment = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    done = run(command, cwd=work, timeout=TEST_TIMEOUT_S, env=environment)
    result.tests_s = time.perf_counter() - started
    if not report.exists():
        raise RuntimeError(f"pytest wrote no report:\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    suites = ElementTree.parse(report).getroot()
    suites = [suites] if suites.tag == "testsuite" else list(suites)
    total = sum(int(s.get("tests", 0)) for s in suites)
    result.failed = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
    result.skipped = sum(int(s.get("skipped", 0)) for s in suites)
    result.passed = total - result.failed - result.skipped
    if done.returncode != 0 or result.failed:
        result.ok = False
        failed = [f"{case.get('classname')}::{case.get('name')}" for s in suites for case in s.iter("testcase")
                  if case.find("failure") is not None or case.find("error") is not None]
        result.notes.append("failed: " + ", ".join(failed[:8]) + (f" and {len(failed) - 8} more" if len(failed) > 8 else ""))
        print(done.stdout[-6000:], file=sys.stderr)


def smoke(python: Path, work: Path, result: Result) -> None:
    """What a user runs, beside this torch: the demo, then every command of the installed-wheel
    suite (tests/test_installed_wheel.py's command_lines) on its trace, with the venv's own
    `spiketrace`, from outside the repository."""
    sys.path.insert(0, str(REPO))
    from tests.test_installed_wheel import MADE, PRESET_FILE_CODE, command_lines

    out = work / f"smoke-{result.version}"
    out.mkdir(exist_ok=True)
    preset_file = run([str(python), "-c", PRESET_FILE_CODE], cwd=out).stdout.strip()
    commands = {"demo": ["demo", str(out / "demo-trace"), "--force"],
                **command_lines(out / "demo-trace", out, preset_file)}
    failed = []
    for name, arguments in commands.items():
        done = run([str(python.parent / "spiketrace"), *arguments], cwd=out, timeout=600)
        if done.returncode != 0:
            failed.append(name)
            print(f"torch {result.version}: spiketrace {name} exited {done.returncode}: {done.stderr[-1500:]}",
                  file=sys.stderr)
    failed += [f"{made} not written" for made in MADE if not (out / made).is_file()]
    result.commands = (len(commands) - len(failed), len(commands))
    if failed:
        result.ok = False
        result.notes.append("commands failed: " + ", ".join(failed))


def digests(python: Path, work: Path) -> dict[str, str]:
    done = run([str(python), str(REPO / "scripts" / "trace_digest.py")], cwd=work, timeout=1200)
    if done.returncode != 0:
        raise RuntimeError(f"scripts/trace_digest.py failed:\n{done.stderr[-3000:]}")
    found = {}
    for line in done.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3:
            found[f"{parts[0]} {parts[1]}"] = parts[2]
    return found


def check_version(version: str, args, work: Path) -> Result:
    """Install, probe and test one torch, and take its digests where SpikingJelly runs."""
    result = Result(version)
    started = time.perf_counter()
    try:
        python = prepare(args.venvs, version, args.wheel, result)
        found = probe(python, work)
        result.spikingjelly_runs = with_spikingjelly = found["spikingjelly"] is None
        if not with_spikingjelly:
            result.notes.append(f"SpikingJelly 2.0.0 does not run ({found['spikingjelly'][:90]}): its tests left out")
        result.notes += [f"cannot tell: {entry['feature']}" for entry in found["limitations"] or []]
        if found["recomputation"] != "saved_tensors_hooks_stack":
            result.notes.append(f"recomputation told by: {found['recomputation']}")
        if found["degraded"]:
            result.ok = False
            result.notes.append(f"probe capture degraded: {found['degraded']}")
        if not found["stacked_modes"]:
            result.notes.append("stacked dispatch modes are handed different ops: the tests that stack one with "
                                "the recorder left out")
        has = {"spikingjelly": with_spikingjelly, "stacked modes": found["stacked_modes"]}
        chosen = {**QUICK_TESTS, **({} if args.quick else FULL_TESTS)}
        tests = [test for test, needs in chosen.items() if all(has[need] for need in needs)]
        run_tests(python, work, tests, NEVER + (() if with_spikingjelly else WITHOUT_SPIKINGJELLY), result)
        smoke(python, work, result)
        if with_spikingjelly:
            result.digests = digests(python, work)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        result.ok = False
        result.notes.append(str(exc).strip().splitlines()[0][:200])
        print(f"torch {version}: {exc}", file=sys.stderr)
    result.wall_s = time.perf_counter() - started
    return result


def digest_cell(result: Result, reference: dict[str, str]) -> str:
    if not result.digests:
        return "n/a (no SpikingJelly)" if result.spikingjelly_runs is False else "n/a"
    if not reference:
        return f"no reference ({len(result.digests)} taken)"
    equal = sum(result.digests.get(key) == digest for key, digest in reference.items())
    differing = sorted({key.split()[1] for key, digest in reference.items() if result.digests.get(key) != digest})
    return f"{equal} of {len(reference)}" + (f" (differ: {', '.join(differing)})" if differing else "")


def print_table(results: list[Result], reference: dict[str, str], reference_version: str) -> None:
    header = ("torch", "install s", "tests s", "wall s", "tests passed/failed", "commands ok",
              f"digests equal to {reference_version}", "notes")
    rows = []
    for r in results:
        install = "-" if r.install_s is None else f"{r.install_s:.0f}" + (" (reused)" if r.reused else "")
        tests = "-" if r.tests_s is None else f"{r.tests_s:.0f}"
        counted = f"{r.passed}/{r.failed}" + (f" ({r.skipped} skipped)" if r.skipped else "")
        commands = "-" if r.commands is None else f"{r.commands[0]}/{r.commands[1]}"
        rows.append((r.version, install, tests, f"{r.wall_s:.0f}", counted, commands, digest_cell(r, reference),
                     "; ".join(r.notes) or "-"))
    widths = [max(len(str(row[i])) for row in (header, *rows)) for i in range(len(header) - 1)]
    for row in (header, tuple("-" * w for w in widths) + ("-----",), *rows):
        print(" | ".join(str(cell).ljust(width) for cell, width in zip(row, widths)) + " | " + row[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--versions", nargs="+", default=list(DEFAULT_VERSIONS), help="torch versions to check")
    parser.add_argument("--wheel", required=True, help="the built spiketrace wheel (a glob is expanded)")
    parser.add_argument("--venvs", type=Path, default=Path(tempfile.gettempdir()) / "torch_venvs",
                        help="where the environments live (reused when they hold the torch asked for)")
    parser.add_argument("--reference", default=REFERENCE, help="the torch whose digests the others are compared with")
    parser.add_argument("--quick", action="store_true", help="the CI subset: QUICK_TESTS only")
    args = parser.parse_args(argv)
    wheels = sorted(glob.glob(args.wheel))
    if len(wheels) != 1:
        parser.error(f"--wheel {args.wheel!r} names {len(wheels)} files; one wheel is needed")
    args.wheel = Path(wheels[0]).resolve()
    args.venvs = args.venvs.resolve()
    args.venvs.mkdir(parents=True, exist_ok=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="spiketrace-torch-matrix-") as directory:
        work = Path(directory)
        (work / "pytest.ini").write_text(PYTEST_INI)
        for version in args.versions:
            result = check_version(version, args, work)
            results.append(result)
            print(f"torch {version}: {'ok' if result.ok else 'FAILED'} in {result.wall_s:.0f} s "
                  f"({result.passed} passed, {result.failed} failed)", file=sys.stderr, flush=True)
        reference_result = next((r for r in results if r.version == args.reference), None)
        if reference_result is None and any(r.digests for r in results):
            # only the digests of the reference torch: its tests are not what this run checks
            reference_result = Result(args.reference)
            started = time.perf_counter()
            try:
                python = prepare(args.venvs, args.reference, args.wheel, reference_result)
                reference_result.digests = digests(python, work)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                print(f"reference torch {args.reference}: {exc}", file=sys.stderr)
            print(f"reference torch {args.reference}: its digests in {time.perf_counter() - started:.0f} s "
                  f"(install {reference_result.install_s or 0:.0f} s)", file=sys.stderr, flush=True)
    reference = reference_result.digests if reference_result is not None else {}
    print_table(results, reference, args.reference)
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
