"""Seeded fuzz of the capture as a guest: tensor kinds x op chains x capture settings.

tests/guest/programs/fuzz_tensor_kinds.py draws, from a seed, cases of a tensor kind (strided
views, stride-0, channels_last, zero-size, 0-d, every dtype, conj and neg views, sparse, nested,
quantized, inference, freed storages, autograd leaves, a __torch_function__ subclass,
Parameters, meta) and a chain of one to three ops, each in a try/except of its own. Run plain
and under capture (tests/guest/harness.compare), every case must:
- kill nothing (no signal) and raise under capture exactly what it raises plain (type and first
  message line; plain torch decides what is legal);
- return the same values, dtypes, shapes, strides, autograd facts and version counters;
- leave a trace that validates and counts, or say in the manifest's `degraded` list which op the
  capture could not record.
A failure names the seed and the case (`case_NNN_<kind><shape>[_unseen]_<op>...`) with the
command that runs it alone: when the reports agree but the run or the trace does not, the
failing case is found by running halves of the cases again (each case draws from its own seed,
so it runs alone the same).
"""

from __future__ import annotations

import json
import pickle
import re
import shlex
import subprocess

import pyarrow.parquet as pq
import pytest

from tests.guest.harness import check_trace, compare, run, same

PROGRAM = "fuzz_tensor_kinds"
CASES = 100
# (seed, recording(...) options, the Python record path): every statistics level, deferred
# statistics, kept binary inputs (packed_inputs), and the compiled and the Python record path
# (SPIKETRACE_SLOW_PATHS=all).
RUNS = [
    (1, {}, False),
    (2, {"value_statistics": "synaptic"}, False),
    (3, {"value_statistics": "none"}, False),
    (4, {"defer_statistics": True, "keep_binary_inputs": True}, False),
    (5, {}, True),
    (6, {"value_statistics": "synaptic", "defer_statistics": True}, True),
    (7, {"value_statistics": "none"}, True),
    (8, {"defer_statistics": True, "keep_binary_inputs": True}, True),
]
# The program has no model, optimizer or thread: the capture may give up only on an op.
OP_SITES = ("dispatch", "statistics")
OP_NAME = re.compile(r"\b(aten|prim|prims|quantized)\.\w+")  # prim.layout: a TorchScript prim op
PROBES = 16  # captured reruns spent finding the case behind a failed run or trace


def environment(seed: int, options: dict, slow_paths: bool, only: list[int] | None = None) -> dict:
    env = {"SPIKETRACE_FUZZ_SEED": str(seed), "SPIKETRACE_FUZZ_CASES": str(CASES),
           "SPIKETRACE_FUZZ_OPTIONS": json.dumps(options)}
    if slow_paths:
        env["SPIKETRACE_SLOW_PATHS"] = "all"
    if only is not None:
        env["SPIKETRACE_FUZZ_ONLY"] = ",".join(str(index) for index in only)
    return env


def command(env: dict) -> str:
    settings = " ".join(f"{name}={shlex.quote(value)}" for name, value in env.items())
    return (f"{settings} SPIKETRACE_GUEST_TRACE=/tmp/fuzz_trace SPIKETRACE_GUEST_OUT=/tmp/fuzz.pkl PYTHONPATH=. "
            f"python tests/guest/programs/{PROGRAM}.py")


def case_names(tmp_path) -> dict[int, str]:
    """Case index -> its report key, from whichever run reported."""
    for name in ("plain.pkl", "captured.pkl"):
        if (tmp_path / name).exists():
            seen = pickle.loads((tmp_path / name).read_bytes())
            return {int(key.split("_")[1]): key for key in seen if key.startswith("case_")}
    return {}


def first_difference(plain, captured, path=""):
    """Where two reported values first differ, and what each holds there."""
    if isinstance(plain, dict) and isinstance(captured, dict):
        for key in sorted(plain.keys() | captured.keys(), key=str):
            if not same(plain.get(key), captured.get(key)):
                return first_difference(plain.get(key), captured.get(key), f"{path}[{key!r}]")
    elif isinstance(plain, (list, tuple)) and isinstance(captured, (list, tuple)) and len(plain) == len(captured):
        for position, (a, b) in enumerate(zip(plain, captured)):
            if not same(a, b):
                return first_difference(a, b, f"{path}[{position}]")
    return f"{path or 'as a whole'}: plain {str(plain)[:300]} / captured {str(captured)[:300]}"


def differences(tmp_path) -> list[str]:
    if not ((tmp_path / "plain.pkl").exists() and (tmp_path / "captured.pkl").exists()):
        return []
    plain = pickle.loads((tmp_path / "plain.pkl").read_bytes())
    captured = pickle.loads((tmp_path / "captured.pkl").read_bytes())
    return [f"{key} {first_difference(plain.get(key), captured.get(key))}"
            for key in sorted(plain.keys() | captured.keys()) if not same(plain.get(key), captured.get(key))]


PROGRESS = re.compile(r"(?m)^case_\d{3}_\S*\n")


def without_progress(text: str) -> str:
    """Text (a stderr tail) without the program's progress lines but the last: the case it died in."""
    begun = PROGRESS.findall(text)
    return f"(last case begun: {begun[-1].strip()})\n{PROGRESS.sub('', text)}" if begun else text


def captured_failure(tmp_path, env: dict, counts: bool) -> str | None:
    """Why a captured run of these cases fails (a signal, an exit, its trace), or None."""
    tmp_path.mkdir(parents=True)
    try:
        done, _ = run(PROGRAM, tmp_path / "captured.pkl", tmp_path / "trace", env=env)
    except subprocess.TimeoutExpired as exc:
        return f"hung: {exc}"
    if done.returncode:
        return f"exit {done.returncode}: {without_progress(done.stderr)[-1500:]}"
    try:
        check_trace(tmp_path / "trace", counts=counts)
    except Exception as exc:  # noqa: BLE001 - any way the trace check fails is the failure
        return f"{type(exc).__name__}: {str(exc)[:1500]}\n{manifest_facts(tmp_path / 'trace')}"
    return None


def manifest_facts(trace) -> str:
    """What the manifest says of the capture: its status, error and degraded entries."""
    try:
        manifest = json.loads((trace / "manifest.json").read_text())
    except (OSError, ValueError) as exc:
        return f"(no manifest: {exc})"
    return (f"manifest status {manifest.get('status')!r}, error {manifest.get('error')!r}, "
            f"degraded {manifest.get('degraded')}")[:3000]


def narrowed(tmp_path, seed: int, options: dict, slow_paths: bool, counts: bool) -> str:
    """The fewest cases found (halving) whose captured run alone still fails, and how."""
    cases, probes, found = list(range(CASES)), 0, None
    while len(cases) > 1 and probes < PROBES:
        half = len(cases) // 2
        for part in (cases[:half], cases[half:]):
            probes += 1
            env = environment(seed, options, slow_paths, part)
            failure = captured_failure(tmp_path / f"probe{probes}", env, counts)
            if failure is not None:
                cases, found = part, failure
                break
        else:
            break  # fails only with cases of both halves together
    if found is None:
        found = captured_failure(tmp_path / "probe_all", environment(seed, options, slow_paths, cases), counts)
        if found is None:
            return "no captured run of a part of the cases fails alone (the comparison itself failed)"
    names = case_names(tmp_path)
    return (f"fails with cases {[names.get(index, index) for index in cases]} alone, reproduce: "
            f"{command(environment(seed, options, slow_paths, cases))}\n{found}")


def case_of(trace, first_seq: int | None) -> int | None:
    """The case a record belongs to: that of the last `forward_caseNNN` stage begun before it."""
    markers = pq.read_table(trace / "stage_markers").to_pylist()
    begun = [(row["seq"], int(row["name"].removeprefix("forward_case"))) for row in markers if row["kind"] == "begin"]
    before = [(seq, case) for seq, case in begun if first_seq is not None and seq <= first_seq]
    return max(before)[1] if before else None


def run_id(seed: int, options: dict, slow_paths: bool) -> str:
    settings = "-".join(f"{name}={value}" for name, value in options.items()) or "defaults"
    return f"seed{seed}-{settings}-{'python' if slow_paths else 'compiled'}"


@pytest.mark.parametrize("seed, options, slow_paths", RUNS, ids=[run_id(*settings) for settings in RUNS])
def test_a_fuzzed_guest_sees_the_same_under_capture(tmp_path, seed, options, slow_paths):
    env = environment(seed, options, slow_paths)
    where = f"seed {seed}, options {options}, {'Python' if slow_paths else 'compiled'} record path"
    counts = options.get("value_statistics") != "none"  # the counters need synaptic statistics at least
    try:
        manifest, _ = compare(PROGRAM, tmp_path, env=env, counts=counts)
    except Exception as failure:  # noqa: BLE001 - an assertion, or the trace failing to count
        differing = differences(tmp_path)
        if differing:  # the report keys name the cases
            detail = "the captured run differs in\n  " + "\n  ".join(differing)
        else:
            detail = narrowed(tmp_path, seed, options, slow_paths, counts)
        raise AssertionError(f"{where}: {detail}\nreproduce all: {command(env)}\n"
                             f"{type(failure).__name__}: {without_progress(str(failure))}\n"
                             f"{manifest_facts(tmp_path / 'trace')}") from None
    # compare() checked that each degraded entry names a site and a `what`; here the `what` must
    # be the op the capture gave up on (the failure is then counted, the op's rows dropped).
    names = case_names(tmp_path)
    unnamed = [(names.get(case_of(tmp_path / "trace", entry.get("first_seq"))), entry)
               for entry in manifest.get("degraded", [])
               if entry["site"] not in OP_SITES or not OP_NAME.search(entry["what"])]
    assert not unnamed, (f"{where}: degraded entries naming no op (first case, entry): {unnamed}\n"
                         f"reproduce: {command(env)}")
