"""Hypothesis-driven mutations of a real trace and its directory, each run through
what the four trace commands do (info, validate, counts, energy) in this process.

Every mutation must end in one of two outcomes:
- rejected: opening raises TraceError whose message is one line naming the file (and the
  manifest field or column), or `validate` lists problems, each one line naming a file;
- unchanged: the trace opens, `validate` is clean, and every number equals the original's.
Anything else fails the test: a validated trace with other numbers (silent wrong), another
exception type (generic), or a case running past its time limit (hang; SIGALRM interrupts a
blocking open of a FIFO, PEP 475).

Mutations: bit flips anywhere in a committed part (footer and pages), truncation, a removed
part, parts rewritten with a dropped, retyped or implausible column (with and without
recommitting them, as a buggy writer or a hand edit would), manifest fields given wrong
types, absurd sizes, deep nesting or part entries pointing elsewhere, FIFOs, sockets and
symlinks in place of parts, tables and manifests, and leftovers that are never committed
(which must leave the numbers unchanged). Seeded (derandomize) and sampled; the counts per
outcome are printed (pytest -s) and recorded as the test's `trace_fuzz` property.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spiketrace.analyze import TraceError, open_trace
from spiketrace.analyze.counters import count
from spiketrace.analyze.energy import energy
from spiketrace.schemas import layout
from tests.trace_surgery import rewrite_part

pytest.importorskip("spikingjelly")

EXAMPLES = 110
CASE_SECONDS = 60
OUTCOMES: Counter = Counter()
KINDS: Counter = Counter()


def numbers(trace) -> dict:
    """What counts and energy print, to compare with the original trace's."""
    found = {f"count.{name}": value for name, value in count(trace).totals().items()}
    for model in ("compute", "neuromc"):
        found[f"energy.{model}"] = energy(trace, model).energy_total_pj
    found["info.events"] = trace.summary()["counts"]["events"]
    return found


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    from tests.training_runs import record

    root = tmp_path_factory.mktemp("fuzz") / "original"
    record(root, 2, flush_events=160, compact=False)  # several committed parts per table
    with open_trace(root) as trace:
        assert trace.validate() == []
        return root, numbers(trace)


class Hang(Exception):
    pass


@contextmanager
def time_limit(seconds: int):
    def alarm(signum, frame):
        raise Hang(f"no result after {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def committed_parts(root: Path) -> list[Path]:
    manifest = json.loads((root / layout.MANIFEST_NAME).read_text())
    return [root / entry["path"] for entries in manifest["parts"].values() for entry in entries]


# --- the mutations: each takes the trace root and hypothesis' data, and changes the trace ---


def flip_bit(root, data):
    part = data.draw(st.sampled_from(committed_parts(root)))
    raw = bytearray(part.read_bytes())
    at = data.draw(st.integers(0, len(raw) * 8 - 1))
    raw[at // 8] ^= 1 << (at % 8)
    part.write_bytes(bytes(raw))


def truncate(root, data):
    part = data.draw(st.sampled_from(committed_parts(root)))
    raw = part.read_bytes()
    part.write_bytes(raw[: data.draw(st.integers(0, len(raw) - 1))])


def remove_part(root, data):
    data.draw(st.sampled_from(committed_parts(root))).unlink()


def _rewrite(root, data, transform):
    parts = [p for p in committed_parts(root) if transform(p) is not None]
    part = data.draw(st.sampled_from(parts))
    rewrite_part(part, lambda table: transform(part)(table), commit=data.draw(st.booleans()))


def _table_of(part: Path) -> str:
    return part.parent.parent.name


def drop_column(root, data):
    def transform(part):
        import pyarrow.parquet as pq

        names = pq.read_schema(part).names
        column = data.draw(st.sampled_from(names))
        return lambda table: table.drop_columns([column])

    part = data.draw(st.sampled_from(committed_parts(root)))
    rewrite_part(part, transform(part), commit=data.draw(st.booleans()))


def retype_column(root, data):
    part = data.draw(st.sampled_from(committed_parts(root)))

    def transform(table):
        index = data.draw(st.integers(0, table.num_columns - 1))
        column = table.column(index)
        if pa.types.is_integer(column.type):
            new = pa.array([str(v) for v in column.to_pylist()])
        else:
            new = pa.array(range(len(column)), type=pa.int64())
        return table.set_column(index, table.field(index).name, new)

    rewrite_part(part, transform, commit=data.draw(st.booleans()))


IMPLAUSIBLE = {  # table -> (column, a value no real trace has)
    "tensors": [("numel", -316), ("numel", 12345), ("element_size", 3), ("storage_offset", -1)],
    "events": [("seq", -5), ("step", -1)],
    "event_tensors": [("tensor_id", -2)],
    "collectives": [],
    "stage_markers": [("phase", "sideways")],
    "module_events": [("kind", "forward_sideways")],
    "optimizer_steps": [("numel", 7)],
}


def implausible_value(root, data):
    candidates = [p for p in committed_parts(root) if IMPLAUSIBLE.get(_table_of(p)) and
                  __import__("pyarrow.parquet").parquet.read_metadata(p).num_rows]
    part = data.draw(st.sampled_from(candidates))
    column, value = data.draw(st.sampled_from(IMPLAUSIBLE[_table_of(part)]))

    def transform(table):
        index = table.schema.get_field_index(column)
        values = table.column(index).to_pylist()
        values[data.draw(st.integers(0, len(values) - 1))] = value
        return table.set_column(index, table.field(index), pa.array(values, type=table.field(index).type))

    rewrite_part(part, transform, commit=data.draw(st.booleans()))


WRONG_VALUES = [None, [], {}, "x", -1, 2**70, 10**400, 1.5, True, float("nan"), [[[[[]]]]], "1.2", {"a": {"b": {}}}]
MANIFEST_FIELDS = ["format", "schema_version", "status", "rank", "world_size", "run_id", "started_at", "ended_at",
                   "versions", "device", "settings", "metadata", "counts", "parts", "steps_recorded", "degraded",
                   "compiled", "compiled_seen", "tracker_underflows", "error"]


def _edit_manifest(root, edit):
    path = root / layout.MANIFEST_NAME
    manifest = json.loads(path.read_text())
    edit(manifest)
    text = json.dumps(manifest) if not isinstance(manifest, str) else manifest
    path.write_text(text)


def manifest_field(root, data):
    field = data.draw(st.sampled_from(MANIFEST_FIELDS))
    value = data.draw(st.sampled_from(WRONG_VALUES))
    _edit_manifest(root, lambda m: m.__setitem__(field, value))


def manifest_part_entry(root, data):
    key = data.draw(st.sampled_from(["path", "rows", "bytes", "blake2b"]))
    value = data.draw(st.sampled_from(
        [None, -1, 10**30, "0" * 64, "events/rank=0/../../../etc/passwd", "../other/events/rank=0/part-00000.parquet",
         "events/rank=1/part-00000.parquet", "tensors/rank=0/part-00000.parquet", 3, "x"]))

    def edit(manifest):
        table = data.draw(st.sampled_from(sorted(manifest["parts"])))
        entries = manifest["parts"][table]
        entries[data.draw(st.integers(0, len(entries) - 1))][key] = value

    _edit_manifest(root, edit)


def manifest_deep(root, data):
    depth = data.draw(st.sampled_from([100, 5000, 100_000]))
    (root / layout.MANIFEST_NAME).write_text("[" * depth + "]" * depth)


def manifest_garbage(root, data):
    raw = (root / layout.MANIFEST_NAME).read_bytes()
    cut = data.draw(st.integers(0, len(raw) - 1))
    (root / layout.MANIFEST_NAME).write_bytes(raw[:cut] + data.draw(st.binary(max_size=20)))


def special_file(root, data):
    target = data.draw(st.sampled_from(committed_parts(root) + [root / layout.MANIFEST_NAME]))
    kind = data.draw(st.sampled_from(["fifo", "socket", "symlink to a part of another trace", "symlink to a copy"]))
    if kind.startswith("symlink"):
        elsewhere = root.parent / f"elsewhere-{target.name}"
        shutil.copy(target, elsewhere)
    target.unlink()
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(target))
        sock.close()
    else:
        target.symlink_to(elsewhere)


def symlinked_directory(root, data):
    table = data.draw(st.sampled_from(["events", "tensors", "modules"]))
    moved = root.parent / f"moved-{table}"
    shutil.move(root / table, moved)
    (root / table).symlink_to(moved, target_is_directory=True)


def leftovers(root, data):
    """Files no manifest commits: an interrupted flush, a stale part, garbage. Never read."""
    part = data.draw(st.sampled_from(committed_parts(root)))
    kind = data.draw(st.sampled_from(["copy as next part", "garbage part", "temporary file", "fifo"]))
    next_name = part.parent / layout.part_name(999)
    if kind == "copy as next part":
        shutil.copy(part, next_name)
    elif kind == "garbage part":
        next_name.write_bytes(b"garbage" * 50)
    elif kind == "temporary file":
        (root / "manifest.json.123-0.tmp").write_text("{")
    else:
        os.mkfifo(next_name)


MUTATIONS = {
    "flip bit": flip_bit, "truncate": truncate, "remove part": remove_part, "drop column": drop_column,
    "retype column": retype_column, "implausible value": implausible_value, "manifest field": manifest_field,
    "manifest part entry": manifest_part_entry, "manifest deep nesting": manifest_deep,
    "manifest garbage": manifest_garbage, "special file": special_file, "symlinked directory": symlinked_directory,
    "leftovers": leftovers,
}
MUST_KEEP_NUMBERS = {"leftovers"}


def outcome(root: Path, original_numbers: dict) -> str:
    """Run what the commands run; return 'rejected' or 'unchanged', or fail the test."""
    try:
        with time_limit(CASE_SECONDS):
            try:
                trace = open_trace(root)
            except TraceError as exc:
                message = str(exc)
                assert "\n" not in message and str(root) in message, message
                return "rejected at open"
            with trace:
                problems = trace.validate()
                if problems:
                    assert all("\n" not in p for p in problems), problems
                    assert any(str(root) in p for p in problems), problems
                    return "rejected by validate"
                found = numbers(trace)
    except Hang as exc:
        pytest.fail(f"hang: {exc}")
    assert found == original_numbers, "silent wrong numbers: validate is clean but the numbers changed"
    return "unchanged"


@settings(max_examples=EXAMPLES, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_every_mutation_is_rejected_or_changes_nothing(original, tmp_path_factory, data):
    source, original_numbers = original
    kind = data.draw(st.sampled_from(sorted(MUTATIONS)))
    root = tmp_path_factory.mktemp("case") / "trace"
    shutil.copytree(source, root)
    MUTATIONS[kind](root, data)
    result = outcome(root, original_numbers)
    if kind in MUST_KEEP_NUMBERS:
        assert result == "unchanged", kind
    OUTCOMES[result] += 1
    KINDS[kind] += 1


def test_zz_report_the_counts(record_property):
    """Runs after the sampled test (file order): prints and records what the fuzzing saw."""
    if not OUTCOMES:
        pytest.skip("the mutation test did not run")
    tried = sum(OUTCOMES.values())
    report = {"mutations tried": tried, **OUTCOMES, "silent wrong": 0, "hang": 0, "generic": 0, "kinds": dict(KINDS)}
    print("\ntrace fuzz:", json.dumps(report))
    record_property("trace_fuzz", json.dumps(report))
    assert tried == EXAMPLES and len(KINDS) == len(MUTATIONS)
