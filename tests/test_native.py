"""The compiled per-op path (capture/native/scan/scan.c, capture/native/record/, capture/native/__init__.py).

Its one-pass scan must give every tensor's (nnz, is01) exactly as a Python reading of the
values does, whatever the dtype, layout or odd value; its per-op record must write the very
trace the Python path writes, on a training script written as users write them (in-place
ops, views, a no_grad block, an inference_mode block, requires_grad set late); a failure
inside it must reach the user as nothing but a `degraded` entry. tests/test_fast_paths.py
compares the zoo's traces with each fast path off, these two included.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import spiketrace.capture.native
from spiketrace.analyze import open_trace
from spiketrace.capture import Recorder
from spiketrace.capture.ops.dispatch import OpLog
from spiketrace.capture.session.fast_paths import ENVIRONMENT_VARIABLE
from spiketrace.capture.tensors.value_counts import python_stats
from spiketrace.schemas.tables import TABLES
from tests.test_fast_paths import ORDER


def test_the_extension_was_built():
    # The install builds it (pyproject.toml's ext-modules); an install without a compiler
    # falls back to Python, which a machine that means to can declare.
    if os.environ.get("SPIKETRACE_NO_NATIVE") == "1":
        pytest.skip("SPIKETRACE_NO_NATIVE=1: this install has no compiled path")
    assert spiketrace.capture.native.AVAILABLE


def _reference(t: torch.Tensor) -> tuple[int, bool]:
    """nnz and is01 read off the values one by one (float() of each: NaN != 0, -0.0 == 0)."""
    values = [complex(v) for v in t.reshape(-1).tolist()]
    return sum(v != 0 for v in values), all(v == 0 or v == 1 for v in values)


DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.bool, torch.uint8, torch.int8,
          torch.int16, torch.int32, torch.int64] + [getattr(torch, n) for n in ("uint16", "uint32", "uint64")
                                                  if hasattr(torch, n)]


def _cases(dtype: torch.dtype) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    binary = (torch.rand(6, 5, 70, generator=generator) < 0.3).to(dtype)
    cases = {
        "binary": binary, "empty": binary[:, :0], "scalar": binary[0, 0, 0], "one element": binary[:1, :1, :1],
        "transposed": binary.transpose(0, 2), "permuted": binary.permute(1, 2, 0), "sliced": binary[1:, ::2, 3:],
        "expanded": binary[:, :1].expand(6, 9, 70), "flipped": binary.flip(1), "long": binary.reshape(-1),
        "channels last": binary.reshape(3, 2, 5, 70).contiguous(memory_format=torch.channels_last),
        "large": (torch.rand(300_000, generator=generator) < 0.1).to(dtype),  # past the GIL release
    }
    if dtype is not torch.bool:
        top = 1e4 if dtype.is_floating_point else min(torch.iinfo(dtype).max, 2**62)  # torch sets no larger uint64
        for name, value in (("two", 2), ("max", top)):
            odd = binary.clone()
            odd[2, 3, 4] = value
            cases[name] = odd
        if dtype.is_signed or dtype.is_floating_point:
            odd = binary.clone()
            odd[0, 0, 0] = -1
            cases["minus one"] = odd
    if dtype.is_floating_point:
        for name, value in (("nan", float("nan")), ("minus zero", -0.0), ("inf", float("inf")),
                            ("almost one", 1 - 2**-7), ("tiny", 2**-20)):
            odd = binary.clone()
            odd[5, 4, 69] = value
            cases[name] = odd
        cases["random"] = torch.randn(4, 33, generator=generator).to(dtype)
    return cases


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_the_scan_counts_what_the_values_say(dtype):
    for name, t in _cases(dtype).items():
        expected = _reference(t)
        assert spiketrace.capture.native.scan_stats(t) == expected, (dtype, name)
        assert python_stats(t) == expected, (dtype, name)


def test_the_scan_finds_the_openmp_runtime_torch_runs_on(shared_scans):
    if not spiketrace.capture.native.AVAILABLE:
        pytest.skip("no compiled path")
    # torch's Linux wheels run their CPU kernels on libgomp; the scan shares that team.
    if "OpenMP" not in torch.__config__.parallel_info():
        pytest.skip("this torch runs no OpenMP runtime")
    assert shared_scans


def test_the_scan_finds_the_runtime_when_the_module_loaded_before_torch():
    # spiketrace.capture.native._native without torch (the writer's flush imports it, analyses may): the runtime
    # torch loads later is found at the first large scan.
    if not spiketrace.capture.native.AVAILABLE or "OpenMP" not in torch.__config__.parallel_info():
        pytest.skip("no compiled path, or a torch without OpenMP")
    script = (
        "import sys\n"
        "from spiketrace.capture.native import _native\n"
        "assert 'torch' not in sys.modules\n"
        "before = _native.parallel_scan()[0]\n"
        "import torch\n"
        "from spiketrace.capture.native import scan_stats\n"
        "x = (torch.rand(1 << 20) < 0.5).float()\n"
        "assert scan_stats(x) == (int((x != 0).sum()), True)\n"
        "print(before, _native.parallel_scan()[0])\n"
    )
    found = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    assert found == ["False", "True"]


@pytest.mark.parametrize("threads", [2, 3, 5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bool, torch.int64], ids=str)
def test_a_scan_shared_among_threads_counts_what_the_values_say(shared_scans, dtype, threads):
    if not spiketrace.capture.native.AVAILABLE:
        pytest.skip("no compiled path")
    # Cut into `threads` runs of a multiple of 64 elements each, across row ends of strided
    # views (transposed, sliced, flipped, expanded), the counts are the reference's.
    torch.set_num_threads(threads)  # the team the scan asks torch's runtime for
    for name, t in _cases(dtype).items():
        assert spiketrace.capture.native.scan_stats(t) == _reference(t), (dtype, threads, name)
    ragged = (torch.rand(7, 129, 3) < 0.5).to(dtype)[:, 1:, ::2]  # rows of 128 x 2 elements
    assert spiketrace.capture.native.scan_stats(ragged) == _reference(ragged)


def test_parallel_scan_refuses_settings_it_cannot_keep():
    if not spiketrace.capture.native.AVAILABLE:
        pytest.skip("no compiled path")
    before = spiketrace.capture.native._native.parallel_scan()
    for bad in ({"min_bytes": -1}, {"max_threads": 0}, {"max_threads": 65}):
        with pytest.raises(ValueError, match="parallel_scan"):
            spiketrace.capture.native._native.parallel_scan(**bad)
    assert spiketrace.capture.native._native.parallel_scan() == before


def test_a_bool_is_true_whatever_byte_holds_it():
    odd = torch.tensor([0, 2, 1, 255], dtype=torch.uint8).view(torch.bool)  # bytes 2 and 255 read True
    assert _reference(odd) == (3, True)
    assert spiketrace.capture.native.scan_stats(odd) == python_stats(odd) == (3, True)


def test_formats_the_scan_cannot_read_are_left_to_python():
    assert spiketrace.capture.native.scan_stats(torch.zeros(3, dtype=torch.complex64)) is None
    assert spiketrace.capture.native.scan_stats(torch._neg_view(torch.ones(3))) is None  # its memory holds 1, its values -1


class UserNet(nn.Module):
    """A small spiking-style net as a user writes it: in-place activations, views, a residual,
    and ops with tuple outputs (a convolution without bias and its backward, whose grad_bias
    is None; batch norm; max pooling with indices; unbind)."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(12, 24), nn.Linear(24, 12)
        self.conv, self.bn = nn.Conv2d(1, 2, 3, padding=1, bias=False), nn.BatchNorm2d(2)

    def forward(self, x):
        h = self.fc1(x)
        h.relu_()
        spikes = (h > 0.2).float()
        h = self.fc2(spikes[:, :24])
        pooled = F.max_pool2d(self.bn(self.conv(x.view(-1, 1, 3, 4))), 2)
        rows = torch.stack(h.unbind(0))
        return (rows + x).t().contiguous().t() * 0.5 + pooled.mean()


def _run(path, slow: str, monkeypatch, level: str = "full") -> dict[str, pd.DataFrame]:
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, slow)
    torch.manual_seed(0)
    net = UserNet()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    x = torch.rand(8, 12)
    with Recorder(path, model=net, optimizer=optimizer, value_statistics=level) as recorder:
        for _ in range(2):
            optimizer.zero_grad()
            with recorder.stage("forward"):
                loss = F.mse_loss(net(x), torch.zeros(8, 12))
            with recorder.stage("backward"):
                loss.backward()
            with recorder.stage("optimizer"):
                optimizer.step()
            with torch.no_grad():
                probe = net(x[:2]).sum(1)
            with torch.inference_mode():  # inference tensors keep no version: the Python path
                net(x[:3]).abs_()
            late = probe.clone()
            late.requires_grad_()  # the same values, a new state
            (late * 2).sum().backward()
            recorder.step()
        compiled = recorder.ops.native
        recorded = (compiled.recorded, compiled.hooks_recorded) if compiled is not None else (0, 0)
        handler = recorder.mode.__torch_dispatch__
        dispatched = getattr(handler, "taken", 0)  # the compiled handler's calls (a bound method: none)
    monkeypatch.delenv(ENVIRONMENT_VARIABLE)
    tables = {"recorded natively": recorded[0], "hooks natively": recorded[1], "dispatched natively": dispatched}
    with open_trace(path) as trace:
        for table in TABLES:
            frame = trace.sql(f"SELECT * EXCLUDE (rank) FROM {table} ORDER BY {ORDER[table]}")
            tables[table] = frame.drop(columns=["storage_ptr"], errors="ignore")  # the allocator's choice
    return tables


TUPLE_OUTPUTS = ("aten.convolution_backward.default", "aten.native_batch_norm.default",
                 "aten.native_batch_norm_backward.default", "aten.max_pool2d_with_indices.default", "aten.unbind.int")


def test_ops_with_tuple_outputs_take_the_compiled_record(tmp_path, monkeypatch):
    # Ops returning a tuple of tensors and Nones are the compiled record's too; what it
    # writes for them is the Python record's (the comparison below).
    if not spiketrace.capture.native.AVAILABLE:
        pytest.skip("no compiled path in this install")
    in_python = []
    record_in_python = OpLog.record_in_python

    def watched(self, plan, func, args, kwargs, out):
        if not torch.is_inference_mode_enabled():  # inference tensors are the Python path's
            in_python.append(plan.name)
        return record_in_python(self, plan, func, args, kwargs, out)

    monkeypatch.setattr(OpLog, "record_in_python", watched)
    native = _run(tmp_path / "native", "", monkeypatch)
    ops = set(native["events"]["op"])
    assert set(TUPLE_OUTPUTS) <= ops
    assert not set(TUPLE_OUTPUTS) & set(in_python), sorted(set(in_python))
    uses = native["event_tensors"].merge(native["events"][["seq", "op", "out"]], on="seq")
    backward = uses[uses["op"] == "aten.convolution_backward.default"]
    # the input needs no grad and the convolution has no bias: grad_weight only, in its place
    assert set(backward["out"]) == {'[null,{"$t":3},null]'}
    assert set(backward[backward["role"] == "out"]["position"]) == {1}


@pytest.mark.parametrize("level", ["full", "synaptic", "none"])
def test_the_compiled_record_writes_the_trace_the_python_record_writes(tmp_path, monkeypatch, level):
    if not spiketrace.capture.native.AVAILABLE:
        pytest.skip("no compiled path in this install")
    native = _run(tmp_path / "native", "", monkeypatch, level)
    python = _run(tmp_path / "python", "native_record", monkeypatch, level)
    events = len(native["events"])
    # Most of the events took the compiled path; the rest (tuples out, tensor lists, the
    # optimizer's foreach ops, inference tensors, per-op scalars) the Python one.
    assert python.pop("recorded natively") == 0 and native.pop("recorded natively") > events // 2
    # and most module hooks their rows (those that saw an inference tensor went to Python)
    assert python.pop("hooks natively") == 0 and native.pop("hooks natively") > len(native["module_events"]) // 2
    # and the compiled handler took most calls the compiled record took (an op's first call,
    # and those of ops that may decompose, reach it through the Python handler)
    recorded = native["events"].shape[0]
    assert python.pop("dispatched natively") == 0 and native.pop("dispatched natively") > recorded // 2
    for table in TABLES:
        pd.testing.assert_frame_equal(native[table], python[table], obj=table)


def test_a_failure_inside_the_compiled_record_is_only_counted(tmp_path, monkeypatch):
    import spiketrace.capture.tensors.registry

    if not spiketrace.capture.native.AVAILABLE:
        pytest.skip("no compiled path in this install")

    def broken(self, t):
        raise RuntimeError("injected failure naming a tensor kind")

    monkeypatch.setattr(spiketrace.capture.tensors.registry.TensorRegistry, "kind_of", broken)  # read on a kind-cache miss
    torch.manual_seed(0)
    net = UserNet()
    x = torch.rand(8, 12)
    expected = net(x)
    with Recorder(tmp_path / "trace", model=net):
        got = net(x)
    assert torch.equal(got, expected)
    manifest = json.loads((tmp_path / "trace" / "manifest.json").read_text())
    assert manifest["settings"]["native"] is True and "native_record" in manifest["settings"]["fast_paths"]
    dispatch = [d for d in manifest["degraded"] if d["site"] == "dispatch"]
    assert dispatch and all("injected failure naming a tensor kind" in d["error"] for d in dispatch)


def test_the_compiled_handler_counts_capture_failures_and_raises_only_the_users_errors(tmp_path, monkeypatch):
    # capture/native/record/dispatch.c takes an op's calls once its plan is compiled (from its
    # second call): a failure of the record it runs (here the per-op scalars of addmm) is a
    # degraded entry, the user's result untouched; the user's own error (a shape mismatch)
    # reaches the user as torch raises it; the context lock is released on every path (a
    # second thread can take it).
    import threading

    from spiketrace.capture.ops.scalar_rows import OpScalars

    if not spiketrace.capture.native.AVAILABLE:
        pytest.skip("no compiled path in this install")

    def broken(self, name, seq, args, out):
        raise RuntimeError("injected failure in the per-op scalars")

    monkeypatch.setattr(OpScalars, "take", broken)
    torch.manual_seed(0)
    net = nn.Linear(12, 6)
    x = (torch.rand(8, 12) > 0.5).float()
    expected = [net(x) for _ in range(3)]
    a, b, bt = torch.ones(2, 3), torch.ones(2, 3), torch.ones(3, 2)
    with pytest.raises(RuntimeError) as plain:
        torch.mm(a, b)
    with Recorder(tmp_path / "trace", model=net) as recorder:
        handler = recorder.mode.__torch_dispatch__
        got = [net(x) for _ in range(3)]
        torch.mm(a, bt)  # mm's first call: its plan is made, the next call is the handler's
        taken = handler.taken
        with pytest.raises(RuntimeError) as captured:
            torch.mm(a, b)
        lock, free = recorder.ops.context.lock, []
        worker = threading.Thread(target=lambda: free.append(lock.acquire(blocking=False) and (lock.release() or True)))
        worker.start()
        worker.join(timeout=30)
        assert free == [True]  # no call left the lock held
        torch.mm(a, bt)  # the handler's: it goes on recording after the user's error
        assert handler.taken == taken + 1 and taken > 0
    assert all(torch.equal(g, e) for g, e in zip(got, expected))
    assert str(captured.value) == str(plain.value)
    manifest = json.loads((tmp_path / "trace" / "manifest.json").read_text())
    dispatch = [d for d in manifest["degraded"] if d["site"] == "dispatch"]
    assert dispatch and all("injected failure in the per-op scalars" in d["error"] for d in dispatch)
    with open_trace(tmp_path / "trace") as trace:
        ops = list(trace.sql("SELECT op FROM events ORDER BY seq")["op"])
    # three linears (addmm, each after its weight's t), then the two successful mm: the
    # failed one ran no op, so it has no event (nor a degraded entry: the error was the user's)
    assert ops.count("aten.addmm.default") == 3 and ops.count("aten.mm.default") == 2


def _large_ops(x: torch.Tensor, spikes: torch.Tensor, row: torch.Tensor, part: torch.Tensor) -> list[torch.Tensor]:
    """Ops with a propagation rule (capture/tensors/propagation.py) on outputs of 2**18 elements and
    more, above the size from which the compiled record hands a Python rule's op to Python
    (PYTHON_RULE_FROM, 2**17), and the same ops where the rule cannot apply."""
    zeros = torch.zeros_like(x)
    return [
        x.view(-1), x.t(), x.detach(), row.expand(4, 512, -1), x.clone(),  # same elements, in C
        x * 1.0, x + 0, x - 0.0, x / 1, spikes * 0.5, spikes * 3, x + zeros, zeros - x,  # Python's rule applies
        spikes * 0.0, spikes * -0.0,  # a 0/1 x times zero: all zeros
        1 - spikes, -x,
        spikes.double(), x.double(),  # a cast (keyword dtype): 0/1 spikes keep theirs in C, x is scanned
        x * 0.5, x + 1, x / 3, x + x, spikes * spikes,  # no rule applies: scanned in C
        torch.add(x, x, alpha=2), torch.add(x, x, alpha=2.0),  # keyword alpha 2 and 2.0: two JSONs
        x + True, torch.rsub(spikes, 1, alpha=2), part + zeros,  # no rule: a bool, alpha 2, a broadcast
        x.sum(1, keepdim=True), x.sum(1), torch.softmax(x, 1),  # a bool argument (keepdim, half_to_float)
        torch.stack([spikes, spikes, x]), torch.cat([spikes, x], 1), torch.stack([spikes]),  # tensor lists
    ]


def _run_large(path, slow: str, monkeypatch) -> dict:
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, slow)
    torch.manual_seed(0)
    x = torch.randn(512, 512)
    x[::3] = 0
    spikes = (torch.rand(512, 512) < 0.3).float()
    row = spikes[:1]  # not described before the expand: its state is new in the expand's own record
    part = x[1:2]  # a nonzero row, broadcast against zeros
    with Recorder(path) as recorder:
        outputs = _large_ops(x, spikes, row, part)
        recorded = recorder.ops.native.recorded if recorder.ops.native is not None else 0
    monkeypatch.delenv(ENVIRONMENT_VARIABLE)
    with open_trace(path) as trace:
        tables = {table: trace.sql(f"SELECT * EXCLUDE (rank) FROM {table} ORDER BY {ORDER[table]}")
                  .drop(columns=["storage_ptr"], errors="ignore") for table in ("events", "event_tensors", "tensors")}
        out_stats = trace.sql("SELECT t.nnz, t.is01 FROM event_tensors u JOIN tensors t USING (tensor_id) "
                              "WHERE u.role = 'out' ORDER BY u.seq").values.tolist()
    return {"tables": tables, "recorded": recorded, "out_stats": out_stats, "outputs": outputs}


def _ops_a_mode_sees(run) -> list[str]:
    """The ops a plain dispatch mode is handed while `run()` runs."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Seen(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    with Seen() as seen:
        run()
    return seen.ops


def test_the_compiled_record_takes_the_statistics_a_rule_gives_as_the_python_record_does(tmp_path, monkeypatch):
    if not spiketrace.capture.native.AVAILABLE:
        pytest.skip("no compiled path in this install")
    native = _run_large(tmp_path / "native", "", monkeypatch)
    python = _run_large(tmp_path / "python", "native_record", monkeypatch)
    for table, frame in native["tables"].items():
        pd.testing.assert_frame_equal(frame, python["tables"][table], obj=table)
    # Every output's statistics, read from the trace, are its values' own (counted here in Python).
    # torch 2.8 and older hand a dispatch mode x.detach() twice (the view made again from its
    # base after the op: docs/design.md, "torch versions"), newer torch once: an event each.
    one = torch.ones(2)
    detaches = _ops_a_mode_sees(one.detach).count("aten.detach.default")
    expected = [list(python_stats(t)) for t in native["outputs"]]
    expected[2:3] = expected[2:3] * detaches  # x.detach() is the third of _large_ops
    assert len(native["out_stats"]) == 1 + len(expected) and native["out_stats"][1:] == expected  # after zeros_like
    # The compiled path took: the views and clone (their first operand's statistics), the
    # nine ops whose rule it applies itself (x * 1.0, x + 0, x - 0.0, x / 1, x + zeros,
    # zeros - x, 1 - spikes, spikes * 0.0 and * -0.0), -x (negated), the two casts
    # (binary_cast for the spikes), the ten ops no rule applies to (scanned; x + True's bool
    # keyed apart from the int 1), the two sums and the softmax (a bool argument or none), the
    # three stacks and cats (tensor lists; their parts' counts added up) and zeros_like (its
    # keywords hold no tensor). To Python went spikes * 0.5 and spikes * 3:
    # their rule rounds the product in the dtype (capture/tensors/propagation.py _unit_product),
    # which the C code leaves to it.
    assert python["recorded"] == 0 and native["recorded"] == 5 + (detaches - 1) + 9 + 1 + 2 + 10 + 3 + 3 + 1
    kwargs = native["tables"]["events"].set_index("op")["kwargs"]
    assert set(kwargs.loc[["aten.add.Tensor"]]) == {"{}", '{"alpha":2}', '{"alpha":2.0}'}
    assert set(kwargs.loc[["aten._to_copy.default"]]) == {'{"dtype":{"$dtype":"float64"}}'}
    args = native["tables"]["events"].set_index("op")["args"]
    assert set(args.loc[["aten.sum.dim_IntList"]]) == {'[{"$t":0},[1],true]', '[{"$t":0},[1]]'}
    assert set(args.loc[["aten._softmax.default"]]) == {'[{"$t":0},1,false]'}
    assert set(args.loc[["aten.stack.default"]]) == {'[[{"$t":0},{"$t":1},{"$t":2}]]', '[[{"$t":0}]]'}


def _user_neuron():
    """A user's own stateful neuron (SpikingJelly's MemoryModule), single-step, written as
    users write them: its membrane is reassigned between ops of one forward."""
    from spikingjelly.activation_based.base import MemoryModule

    class UserNeuron(MemoryModule):
        def __init__(self):
            super().__init__()
            self.register_memory("v", 0.0)

        def forward(self, x):
            self.v = self.v + x  # a new memory object mid-forward: the next op's record sees it
            spike = (self.v >= 0.5).float()
            self.v = self.v * (1.0 - spike)
            return spike * 2.0

    return UserNeuron()


def test_a_neurons_memories_are_snapshot_at_the_op_after_they_change(tmp_path, monkeypatch):
    # RecordingContext.snapshot_memories compares an active neuron's memories with its last
    # snapshot after every op; the compiled record compares them in C and calls it only when
    # one changed. Both must write the same neuron_memories rows at the same seqs: in the
    # middle of the forward (after each reassignment), not only when the module is left.
    pytest.importorskip("spikingjelly")
    if not spiketrace.capture.native.AVAILABLE:
        pytest.skip("no compiled path in this install")

    from spiketrace.capture.tensors.registry import TensorRegistry

    python_describe = TensorRegistry.describe

    def run(path, slow):
        monkeypatch.setenv(ENVIRONMENT_VARIABLE, slow)
        torch.manual_seed(0)
        neuron = _user_neuron()
        memories_in_python = []

        def describe(self, t, *args, **kwargs):  # the Python path's describe of a memory tensor
            if any(t is value for value in neuron._memories.values()):
                memories_in_python.append(t)
            return python_describe(self, t, *args, **kwargs)

        monkeypatch.setattr(TensorRegistry, "describe", describe)
        with Recorder(path, model=neuron) as recorder:
            for _ in range(3):
                neuron(torch.rand(4, 6))
            recorded = recorder.ops.native.recorded if recorder.ops.native is not None else 0
        monkeypatch.delenv(ENVIRONMENT_VARIABLE)
        monkeypatch.setattr(TensorRegistry, "describe", python_describe)
        with open_trace(path) as trace:
            rows = trace.sql("SELECT m.seq, m.module_id, m.name, m.kind, m.tensor_id, t.shape, t.nnz, t.is01 "
                             "FROM neuron_memories m LEFT JOIN tensors t USING (rank, tensor_id) ORDER BY m.seq, m.name")
        return rows, recorded, len(memories_in_python)

    native, recorded, native_in_python = run(tmp_path / "native", "")
    python, _, python_in_python = run(tmp_path / "python", "native_record")
    assert recorded > 0
    pd.testing.assert_frame_equal(native, python)
    # the compiled record describes the memory tensors itself (capture/native/record/hooks.c describe)
    assert native_in_python == 0 and python_in_python > 0
    tensors = native[native["kind"] == "tensor"]
    assert len(tensors) and tensors["nnz"].notna().all()  # level "full": each memory state scanned
    # per forward: the memory reassigned twice inside it, each seen at the next op
    assert len(native) >= 2 * 3, native


def test_ops_with_per_op_scalars_take_the_compiled_record_and_keep_their_scalars(tmp_path, monkeypatch):
    # mm, addmm and the like: the compiled record writes the event and its tensors, then the
    # per-op scalars are taken in Python with the event's seq (OpLog.took_natively). The
    # traces equal the Python path's (test above); here: they no longer reach the Python
    # record, and their op_stats rows sit on their own events.
    from spiketrace.capture.ops import dispatch

    if not spiketrace.capture.native.AVAILABLE:
        pytest.skip("no compiled path in this install")
    in_python = []
    record_in_python = dispatch.OpLog.record_in_python

    def spy(self, plan, func, args, kwargs, out):
        in_python.append(plan.name)
        return record_in_python(self, plan, func, args, kwargs, out)

    monkeypatch.setattr(dispatch.OpLog, "record_in_python", spy)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(12, 24), nn.ReLU(), nn.Linear(24, 6))
    spikes = (torch.rand(8, 12) > 0.5).float()
    with Recorder(tmp_path / "trace", model=net) as recorder, recorder.stage("forward"):
        net(spikes).sum().backward()
    with open_trace(tmp_path / "trace") as trace:
        stats = trace.sql("SELECT e.op, s.stat FROM op_stats s JOIN events e USING (rank, seq)")
    assert not {"aten.addmm.default", "aten.mm.default"} & set(in_python)
    # NeuroBench's pairs and ternary check on the addmm's own event (SpikingJelly's marginal
    # dot is for 0/1 x 0/1 products: the weights are not)
    assert {("aten.addmm.default", "addmm_nonzero_pairs"), ("aten.addmm.default", "addmm_x_ternary")} <= \
        set(zip(stats["op"], stats["stat"]))
