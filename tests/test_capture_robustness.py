"""Bad use gets clear errors; a crash leaves every flushed part readable; flushing bounds memory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from spiketrace.analyze import open_trace
from spiketrace.capture import Recorder, RecorderError, record_inference, record_training_step, schedule
from spiketrace.capture.session.example import SpikingMLP, example_batch
from spiketrace.capture.store.writer import TracePathError

REPO = Path(__file__).resolve().parents[1]


def test_nested_stage_is_refused(tmp_path):
    with Recorder(tmp_path / "t") as recorder, recorder.stage("forward"):
        with pytest.raises(RecorderError, match="stages do not nest"):
            with recorder.stage("backward"):
                pass


def test_stage_outside_context_is_refused(tmp_path):
    recorder = Recorder(tmp_path / "t")
    with pytest.raises(RecorderError, match="outside the Recorder context"):
        with recorder.stage("forward"):
            pass


def test_stage_name_reused_with_other_options_is_refused(tmp_path):
    with Recorder(tmp_path / "t") as recorder:
        with recorder.stage("fwd", phase="forward"):
            pass
        with pytest.raises(ValueError, match="reused with different options"):
            with recorder.stage("fwd", phase="backward"):
                pass


def test_invalid_phase_is_refused(tmp_path):
    with Recorder(tmp_path / "t") as recorder, pytest.raises(ValueError, match="phase must be one of"):
        with recorder.stage("x", phase="sideways"):
            pass


def test_path_holding_other_data_is_refused(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "notes.txt").write_text("keep me")
    with pytest.raises(TracePathError, match="not a spiketrace trace"):
        with Recorder(tmp_path / "data"):
            pass
    assert (tmp_path / "data" / "notes.txt").read_text() == "keep me"
    (tmp_path / "file").write_text("x")
    with pytest.raises(TracePathError, match="not a directory"):
        with Recorder(tmp_path / "file"):
            pass


def test_existing_trace_is_replaced(tmp_path):
    model = nn.Linear(3, 2)
    record_inference(tmp_path / "t", model, torch.ones(1, 3))
    record_inference(tmp_path / "t", model, torch.ones(4, 3))
    with open_trace(tmp_path / "t") as trace:
        # inputs, not the weight
        shapes = trace.sql("SELECT DISTINCT shape FROM tensors WHERE shape[2] = 3 AND shape[1] <> 2")["shape"]
    assert [list(s) for s in shapes] == [[4, 3]]


def test_model_bound_to_two_recorders_is_refused(tmp_path):
    model = nn.Linear(3, 2)
    with Recorder(tmp_path / "a", model=model):
        with pytest.raises(RecorderError, match="already bound"):
            with Recorder(tmp_path / "b", model=model):
                pass
    with Recorder(tmp_path / "c", model=model):  # free again once the first closed
        pass


def test_suspend_records_nothing_but_keeps_scopes(tmp_path):
    model = nn.Sequential(nn.Linear(3, 2), nn.ReLU())
    with Recorder(tmp_path / "t", model=model) as recorder:
        with recorder.suspend():
            model(torch.ones(1, 3))
        with recorder.stage("forward"):
            (torch.ones(2) * 3).sum()
    with open_trace(tmp_path / "t") as trace:
        ops = list(trace.sql("SELECT op FROM events ORDER BY seq")["op"])
        module_events = trace.count("module_events")
    assert ops == ["aten.ones.default", "aten.mul.Tensor", "aten.sum.default"]
    assert module_events == 0


def test_unlabeled_ops_and_inferred_legacy_stage_options(tmp_path):
    with Recorder(tmp_path / "t") as recorder:
        torch.ones(2).neg()
        with recorder.stage("b1_t0_forward_without_bp_bn"):
            torch.ones(2).neg()
        with recorder.stage("weight_update"):
            torch.ones(2).neg()
    with open_trace(tmp_path / "t") as trace:
        events = trace.sql("SELECT stage, phase FROM events WHERE op = 'aten.neg.default' ORDER BY seq")
        stages = trace.sql("SELECT name, phase, phase_source, reuse_weights, batch_norm_backward, b_index, t_index "
                           "FROM stages ORDER BY begin_seq")
    assert list(events["stage"]) == ["unlabeled", "b1_t0_forward_without_bp_bn", "weight_update"]
    assert events["phase"].isna().tolist() == [True, False, False]
    first, second = stages.to_dict("records")
    assert (first["phase"], first["phase_source"], bool(first["reuse_weights"]), bool(first["batch_norm_backward"])) == (
        "forward", "inferred", True, False)  # b1 > 0 reuses weights, as the seed profiler did
    assert (int(first["b_index"]), int(first["t_index"])) == (1, 0)
    assert second["phase"] == "optimizer"


def test_schedule_records_only_active_steps(tmp_path):
    rule = schedule(skip_first=1, wait=1, active=2, repeat=1)
    assert [rule(step) for step in range(7)] == [False, False, True, True, False, False, False]
    with Recorder(tmp_path / "t", schedule=rule) as recorder:
        for step in range(7):
            torch.full((2,), float(step)).neg()
            recorder.step()
    with open_trace(tmp_path / "t") as trace:
        steps = sorted(set(trace.sql("SELECT step FROM events")["step"]))
        assert trace.manifest["steps_recorded"] == 2
    assert steps == [2, 3]


def test_flushing_writes_parts_and_keeps_every_row(tmp_path):
    torch.manual_seed(0)
    model = SpikingMLP()
    inputs, target = example_batch()
    record_training_step(tmp_path / "t", model, inputs, target=target, loss_fn=nn.functional.mse_loss,
                         optimizer=torch.optim.SGD(model.parameters(), lr=0.1), flush_events=50, compact=False)
    torch.manual_seed(0)
    model = SpikingMLP()
    record_training_step(tmp_path / "one", model, inputs, target=target, loss_fn=nn.functional.mse_loss,
                         optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    with open_trace(tmp_path / "t") as many, open_trace(tmp_path / "one") as one:
        assert len(many.files("events")) > 3 and len(one.files("events")) == 1
        query = "SELECT op, count(*) AS n, sum(seq) AS s FROM events GROUP BY op ORDER BY op"
        assert many.sql(query).equals(one.sql(query))
        nnz = "SELECT sum(nnz) AS n, count(*) AS c FROM tensors"
        assert many.sql(nnz).equals(one.sql(nnz))



def test_a_tensor_freed_while_a_flush_writes_keeps_its_row_for_the_next_part(tmp_path, monkeypatch):
    # A weakref callback appends a tensor_frees row whenever a tensor dies, also in the middle
    # of a flush (a cyclic collection, another thread). Here a tensor dies after tensor_frees
    # was turned into Arrow and before the flush ends: its row must reach the next part, and
    # every part and count must agree (before, the flush counted it and then cleared it).
    from spiketrace.capture.store import writer as writer_module

    doomed = []
    real_write_part = writer_module.TraceWriter._write_part

    def write_part_then_free(self, name, table):
        written = real_write_part(self, name, table)
        if name == "tensor_frees" and doomed:
            doomed.pop()  # the last reference: its frees row is appended now, mid-flush
        return written

    monkeypatch.setattr(writer_module.TraceWriter, "_write_part", write_part_then_free)
    with Recorder(tmp_path / "t", flush_events=10**9, compact=False) as recorder:
        kept = torch.ones(4) * 3  # described (an op's output), then freed during the flush below
        doomed.append(kept)
        del kept
        recorder.writer.flush()
        assert not doomed
        torch.ones(2) + 1  # more rows after it
    with open_trace(tmp_path / "t") as trace:
        assert trace.complete and trace.validate() == []
        frees = trace.count("tensor_frees")
        described = int(trace.sql("SELECT count(DISTINCT uid) AS n FROM tensors")["n"][0])
    # every tensor the ops made is gone by the close: ones(4), its product, ones(2), the sum
    # and the wrapped scalars are each freed once, so each described uid has one frees row
    assert frees == described



def test_deferred_statistics_of_a_row_written_during_a_flush_land_on_that_row(tmp_path, monkeypatch):
    # With statistics kept on the device until a flush (defer_statistics, the accelerator
    # path), a tensors row remembers where its nnz goes. An op recorded while a flush writes
    # its parts leaves its rows for the next part: its statistics must still fill its own row
    # there, not the row that now sits at its old index.
    from spiketrace.capture.store import writer as writer_module

    made = []
    real_write_part = writer_module.TraceWriter._write_part

    def write_part_and_record(self, name, table):
        written = real_write_part(self, name, table)
        if name == "tensors" and not made:
            made.append(torch.arange(12.0).reshape(3, 4) > 4.5)  # 7 nonzeros, recorded mid-flush
        return written

    monkeypatch.setattr(writer_module.TraceWriter, "_write_part", write_part_and_record)
    with Recorder(tmp_path / "t", defer_statistics=True, flush_events=10**9, compact=False) as recorder:
        first = torch.ones(5) * 2  # rows in the first flush
        recorder.writer.flush()
        last = made[0].float() * 3  # 7 nonzeros again, after the flush
    with open_trace(tmp_path / "t") as trace:
        assert trace.complete and trace.validate() == []
        outputs = trace.sql("SELECT e.op, t.nnz, t.is01 FROM events e JOIN event_tensors u USING (seq) "
                            "JOIN tensors t USING (tensor_id) WHERE u.role = 'out' ORDER BY e.seq")
    by_op = {op: (int(nnz), bool(is01)) for op, nnz, is01 in outputs.itertuples(index=False)}
    assert by_op["aten.gt.Scalar"] == (7, True)  # the mid-flush op's own row
    assert by_op["aten.mul.Tensor"] == (7, False) and int(first.count_nonzero()) == 5 and float(last.sum()) == 21.0


CRASHING_SCRIPT = textwrap.dedent(
    """
    import sys, torch
    sys.path.insert(0, {repo!r})
    from spiketrace.capture import Recorder
    with Recorder({path!r}, flush_events=200) as recorder:
        with recorder.stage("forward"):
            x = torch.ones(8)
            for i in range(10_000_000):
                x = x + 1
                if i == 2000:
                    print("flushed", flush=True)
    """
)


def test_killed_capture_leaves_readable_incomplete_trace(tmp_path):
    path = tmp_path / "crash"
    process = subprocess.Popen(
        [sys.executable, "-c", CRASHING_SCRIPT.format(repo=str(REPO), path=str(path))],
        stdout=subprocess.PIPE, text=True,
    )
    assert process.stdout.readline().strip() == "flushed"
    time.sleep(0.2)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["status"] == "running"
    with open_trace(path) as trace:
        assert not trace.complete
        assert any("running" in w or "incomplete" in w for w in trace.warnings)
        events = trace.sql("SELECT count(*) AS n, min(seq) AS lo, max(seq) AS hi FROM events").iloc[0]
    assert events["n"] >= 2000 // 2  # every flushed part is there and readable
    assert events["hi"] - events["lo"] + 1 >= events["n"]


def test_exception_inside_capture_marks_trace_failed(tmp_path):
    with pytest.raises(ZeroDivisionError):
        with Recorder(tmp_path / "t") as recorder, recorder.stage("forward"):
            torch.ones(3).neg()
            _ = 1 / 0
    with open_trace(tmp_path / "t") as trace:
        assert not trace.complete
        assert trace.manifests[0]["status"] == "failed"
        assert "ZeroDivisionError" in trace.manifests[0]["error"]
        assert "aten.neg.default" in set(trace.sql("SELECT op FROM events")["op"])


# --- the capture's own structure and failures (issues 9 and 10) ------------------------------


def test_only_the_recorders_users_import_it():
    """The op log, optimizer log and the rest get a RecordingContext, never the Recorder; its
    users are the API, the one-call scenarios, the example and the framework callbacks' loop."""
    import ast

    allowed = {"__init__.py", "scenarios.py", "example.py", "recorder.py", "loop.py"}
    importers = []
    for path in sorted((REPO / "capture").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                     else [a.name for a in getattr(node, "names", [])] if isinstance(node, ast.Import) else [])
            if any(name == "spiketrace.capture.session.recorder" for name in names):
                importers.append(path.name)
    assert importers and set(importers) <= allowed, importers


def _reference_stats(t: torch.Tensor) -> tuple[int, bool]:
    values = t.reshape(-1).tolist()
    return sum(v != 0 for v in values), all(v == 0 or v == 1 for v in values)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
                                   torch.int8, torch.uint8, torch.bool, torch.complex64])
def test_value_statistics_are_exact_and_leave_storages_resizable(dtype):
    from spiketrace.capture.tensors.registry import immediate_stats

    generator = torch.Generator().manual_seed(0)
    binary = (torch.rand(40, 30, generator=generator) < 0.3).to(dtype)
    cases = {"binary": binary, "zeros": torch.zeros(1000, dtype=dtype), "transposed": binary.t(),
             "expanded": binary[:1].expand(20, 30), "strided": binary.repeat(4, 4)[::3, 1::2]}
    if dtype is not torch.bool:
        near = binary.clone()
        near[3, 4] = 2  # one value that is neither 0 nor 1, after a first element that is
        cases["binary but one"] = near
        if dtype.is_floating_point:
            for name, value in (("nan", float("nan")), ("minus zero", -0.0), ("almost one", 1 - 2**-8)):
                odd = binary.clone()
                odd[7, 7] = value
                cases[name] = odd
            cases["negative view"] = torch._neg_view(binary)  # its memory holds 0 and 1, its values 0 and -1
        if dtype in (torch.int8, torch.int64):
            wrapped = binary.clone()
            wrapped[1, 1] = -1  # -1 - 1 wraps nowhere near 0
            cases["minus one"] = wrapped
    for name, t in cases.items():
        assert immediate_stats(t) == _reference_stats(t), (dtype, name)
    for t in cases.values():  # views share storages: free them only once all were read
        t.untyped_storage().resize_(0)  # raises had a statistic called .numpy() on any of them
        assert t.untyped_storage().nbytes() == 0


def test_failures_are_counted_per_kind_and_logged_once(tmp_path, caplog):
    from spiketrace.capture.store.failures import FailureLog

    saved = []
    log = FailureLog(str(tmp_path / "trace"), on_new_kind=lambda: saved.append(len(log.entries)))
    with caplog.at_level("WARNING", logger="spiketrace.capture"):
        for seq in (5, 6, 7):
            log.report("dispatch", "aten.mul.Tensor", ValueError(f"bad {seq}\nsecond line"), seq)
        log.report("dispatch", "aten.mul.Tensor", KeyError("other type"), 8)
        log.report("stage", "forward", ValueError("x"))
    assert log.entries == [
        {"site": "dispatch", "what": "aten.mul.Tensor", "error": "ValueError: bad 5", "count": 3, "first_seq": 5},
        {"site": "dispatch", "what": "aten.mul.Tensor", "error": "KeyError: 'other type'", "count": 1, "first_seq": 8},
        {"site": "stage", "what": "forward", "error": "ValueError: x", "count": 1, "first_seq": None},
    ]
    assert saved == [1, 2, 3]  # the manifest is rewritten once per new kind, not per failure
    assert len(caplog.records) == 3 and all(str(tmp_path / "trace") in r.getMessage() for r in caplog.records)


def test_a_failed_flush_is_undone_and_the_trace_marked_failed(tmp_path, monkeypatch):
    """The tensors part of the second flush cannot be written: the events and event_tensors
    parts that flush already renamed are removed, the first flush stays whole and listed,
    the user's ops never see an error."""
    import pyarrow.parquet as pq

    import spiketrace.capture.store.writer

    real_write = spiketrace.capture.store.writer._write_all

    def write_all(fd, data):
        where = os.readlink(f"/proc/self/fd/{fd}")  # the file being written (Linux)
        if "tensors/rank=0/part-00001" in where and "event_tensors" not in where:
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    def work():
        x = torch.ones(4)
        for _ in range(30):
            x = x * 1.5  # flushes after 10 and 20 events happen inside these ops
        return x

    monkeypatch.setattr(spiketrace.capture.store.writer, "_write_all", write_all)
    with Recorder(tmp_path / "t", flush_events=10) as recorder, recorder.stage("forward"):
        captured = work()
    assert torch.equal(captured, work())
    manifest = json.loads((tmp_path / "t" / "manifest.json").read_text())
    assert manifest["status"] == "failed"
    [entry] = manifest["degraded"]
    assert entry["site"] == "writer" and entry["what"].endswith("tensors/rank=0/part-00001.parquet")
    assert "No space left" in entry["error"] and "tensors/rank=0/part-00001.parquet" in manifest["error"]
    assert manifest["counts"]["events"] == 10 and len(manifest["parts"]["events"]) == 1
    on_disk = sorted(p.relative_to(tmp_path / "t").as_posix() for p in (tmp_path / "t").rglob("*.parquet*"))
    assert on_disk == sorted(part["path"] for parts in manifest["parts"].values() for part in parts)
    assert pq.read_table(tmp_path / "t" / manifest["parts"]["events"][0]["path"]).num_rows == 10


def test_start_up_accepts_another_ranks_files_in_any_stage(tmp_path):
    from spiketrace.capture.store.writer import prepare_root

    root = tmp_path / "t"
    root.mkdir()
    (root / "manifest.rank=1.json.tmp").write_text("{")  # rank 1 is writing its first manifest
    (root / "events" / "rank=1").mkdir(parents=True)
    (root / "events" / "rank=0").mkdir(parents=True)  # our own, from an older trace
    prepare_root(root, 0)
    assert (root / "events" / "rank=1").is_dir() and not (root / "events" / "rank=0").exists()
    (root / "notes.txt").write_text("not ours")
    with pytest.raises(TracePathError, match="not a spiketrace trace"):
        prepare_root(root, 0)


def test_autocast_and_channels_last_are_recorded_as_they_run(tmp_path):
    # Mixed precision and channels_last change which ops run and the layouts they see; the
    # trace holds exactly that (the casts autocast inserts, bfloat16 operands, NHWC strides)
    # and the user's output is the uncaptured one, bit for bit.
    from tests.real_jobs.tracefiles import table

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 4))
    net = net.to(memory_format=torch.channels_last)
    x = torch.rand(2, 3, 6, 6).to(memory_format=torch.channels_last)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        expected = net(x)
        with Recorder(tmp_path / "t", model=net) as recorder, recorder.stage("forward"):
            out = net(x)
    assert torch.equal(out, expected) and out.dtype is torch.bfloat16
    events = {e["seq"]: e["op"] for e in table(tmp_path / "t", "events").to_pylist()}
    tensors = {t["tensor_id"]: t for t in table(tmp_path / "t", "tensors").to_pylist()}
    [conv] = [seq for seq, op in events.items() if op == "aten.convolution.default"]
    operands = [tensors[u["tensor_id"]] for u in table(tmp_path / "t", "event_tensors").to_pylist()
                if u["seq"] == conv and u["role"] == "arg"]
    assert {t["dtype"] for t in operands} == {"bfloat16"}
    assert operands[0]["stride"] == [108, 1, 18, 3]  # NHWC: channels innermost
    assert "aten._to_copy.default" in events.values()  # the casts autocast inserted
    assert all(t["nnz"] is not None for t in operands)


class _RefusesItsBuffers(nn.Module):
    """A user's module whose named_buffers raises (a wrapper guarding its internals)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 2)

    def named_buffers(self, *args, **kwargs):
        raise RuntimeError("buffers are private")

    def forward(self, x):
        return self.linear(x)


def test_a_module_that_cannot_be_described_is_still_bound_and_recorded(tmp_path):
    # Recorder(model=...) describes every module; one that refuses is recorded without its
    # buffers (`[]`), a `catalog` entry in degraded names its class, and nothing raises
    torch.manual_seed(0)
    model, x = _RefusesItsBuffers(), torch.randn(4, 3)
    expected = model(x)
    with Recorder(tmp_path / "t", model=model) as recorder, recorder.stage("forward"):
        got = model(x)
    assert torch.equal(got, expected)
    manifest = json.loads((tmp_path / "t" / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    [entry] = manifest["degraded"]
    assert entry["site"] == "catalog" and entry["what"].endswith("_RefusesItsBuffers buffers")
    assert entry["error"] == "RuntimeError: buffers are private"
    with open_trace(tmp_path / "t") as trace:
        rows = trace.sql("SELECT class_name, buffers, parameters FROM modules ORDER BY module_id")
        assert "aten.addmm.default" in set(trace.sql("SELECT op FROM events")["op"])
    assert list(rows["class_name"]) == ["_RefusesItsBuffers", "Linear"]
    assert rows["buffers"][0] == "[]" and json.loads(rows["parameters"][1])[0]["name"] == "weight"
