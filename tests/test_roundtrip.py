"""Round trip of every recorded column against an independent reference recorded in the same run.

A reference dispatch mode sits beside the recorder and writes down, for every op, what the
real tensors were right after the op ran (shape, stride, offset, dtype, device, grad flag,
storage pointer, parameter identity, count_nonzero and SpikingJelly's is-binary test), and
SpikingJelly's own AC value for every synaptic op. The trace, read back through DuckDB,
must hold exactly the same facts.
"""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pandas as pd
import pytest
import torch
from spikingjelly.activation_based.neuron import BaseNode
from spikingjelly.activation_based.op_counter.ac import ACCounter
from spikingjelly.activation_based.op_counter.base import is_binary_tensor
from torch.overrides import resolve_name
from torch.utils._python_dispatch import TorchDispatchMode

from spiketrace.analyze import open_trace
from spiketrace.capture import Recorder
from spiketrace.capture.ops.conv_taps import spikingjelly_conv_value
from tests.zoo import CASE_IDS, CASES, OPTIMIZERS, build, run_steps

AC_RULES = ACCounter().rules
SYNAPTIC = {"aten.convolution.default", "aten.mm.default", "aten.bmm.default", "aten.addmm.default", "aten.baddbmm.default"}


def _flatten(args, kwargs, out):
    """Tensors in the recorder's placeholder order: args, kwargs, outputs (lists flattened)."""
    found = []

    def walk(value, role, position, name, item):
        if isinstance(value, torch.Tensor):
            found.append((value, role, position, name, item))
        elif isinstance(value, (list, tuple)):
            for index, element in enumerate(value):
                walk(element, role, position, name, index if item is None else item)

    for i, a in enumerate(args):
        walk(a, "arg", i, None, None)
    for key, v in kwargs.items():
        walk(v, "kwarg", None, key, None)
    if isinstance(out, (list, tuple)):
        for i, o in enumerate(out):
            walk(o, "out", i, None, None)
    else:
        walk(out, "out", 0, None, None)
    return found


def _plain(value):
    """Non-tensor argument values as comparable Python data (tensors as their shape)."""
    if isinstance(value, torch.Tensor):
        return ("T", tuple(value.shape))
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (torch.dtype, torch.device, torch.memory_format, torch.layout)):
        return ("tag", str(value).removeprefix("torch."))
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, torch.ScriptObject):  # the profiler's _RecordFunction handle of optimizer.step
        return ("tag", value._type().qualified_name())
    return ("tag", repr(value))


class Reference(TorchDispatchMode):
    def __init__(self, parameter_names: dict[int, str]) -> None:
        super().__init__()
        self.parameter_names = parameter_names
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = resolve_name(func)
        tensors = []
        for t, role, position, key, item in _flatten(args, kwargs, out):
            tensors.append(
                dict(
                    role=role, position=position, name=key, item=item,
                    shape=list(t.shape), stride=list(t.stride()), storage_offset=t.storage_offset(),
                    dtype=str(t.dtype).removeprefix("torch."), element_size=t.element_size(),
                    device=str(t.device), requires_grad=t.requires_grad, numel=t.numel(), is_meta=t.is_meta,
                    storage_ptr=t.untyped_storage().data_ptr(), parameter=self.parameter_names.get(id(t)),
                    nnz=int(torch.count_nonzero(t)), is01=bool(is_binary_tensor(t)),
                )
            )
        ac = int(AC_RULES[func](args, kwargs, out)) if name in SYNAPTIC else None
        packed = []
        if name in SYNAPTIC:
            offset = 1 if name in ("aten.addmm.default", "aten.baddbmm.default") else 0
            packed = [np.packbits(t.detach().numpy().reshape(-1) != 0).tobytes()
                      for t in args[offset:offset + 2] if is_binary_tensor(t)]
        self.ops.append(
            dict(op=name, grad_enabled=torch.is_grad_enabled(), tensors=tensors, ac=ac, packed=packed,
                 args=_plain(list(args)), kwargs={k: _plain(v) for k, v in kwargs.items()})
        )
        return out


def run_case(tmp_path, case, optimizer_name, **settings):
    model, x = build(case)
    optimizer = OPTIMIZERS[optimizer_name](model.parameters()) if optimizer_name else None
    recorder = Recorder(tmp_path / "trace", model=model, optimizer=optimizer, **settings)
    names = {id(p): f"{type(model).__name__}.{n}" for n, p in model.named_parameters()}
    reference = Reference(names)
    memories, optimizer_rows = [], []

    def neuron_hook(module, args, output):
        memories.append({k: (list(v.shape), v.untyped_storage().data_ptr()) if isinstance(v, torch.Tensor) else v
                         for k, v in module._memories.items()})

    hooks = [m.register_forward_hook(neuron_hook) for m in model.modules() if isinstance(m, BaseNode)]
    if optimizer is not None:
        def optimizer_hook(opt, args, kwargs):
            optimizer_rows.extend((list(p.shape), p.grad is not None, sorted(opt.state.get(p, {})))
                                  for g in opt.param_groups for p in g["params"])
        hooks.append(optimizer.register_step_pre_hook(optimizer_hook))
    with reference, recorder:  # ours innermost: its own statistics must not reach `reference`
        # "optimizer_update": the phase is inferred from the name ("update"), checked below
        run_steps(recorder, model, x, case, optimizer, optimizer_stage="optimizer_update")
    for hook in hooks:
        hook.remove()
    return reference, memories, optimizer_rows



TENSOR_COLUMNS = ["shape", "stride", "storage_offset", "dtype", "element_size", "device", "requires_grad",
                  "numel", "is_meta", "storage_ptr", "parameter", "nnz", "is01"]


def _null(value):
    return None if value is None or value is pd.NA or (isinstance(value, float) and value != value) else value


def _decode(value, tensor_shapes):
    if isinstance(value, list):
        return [_decode(v, tensor_shapes) for v in value]
    if isinstance(value, dict):
        if "$t" in value:
            return ("T", tensor_shapes[value["$t"]])
        if "$float" in value:
            return float(value["$float"])
        (tag, text), = value.items()
        return ("tag", text)
    return value


VARIANTS = {
    "forward": (None, {}),
    "sgd": ("sgd_momentum", {}),
    "adam": ("adam", {}),
    # The accelerator code path (statistics stay on the device until flush), run on CPU,
    # with bit-packed synaptic inputs kept.
    "sgd-deferred-packed": ("sgd_momentum", {"defer_statistics": True, "keep_binary_inputs": True}),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_every_column_round_trips(tmp_path, case, variant):
    optimizer_name, settings = VARIANTS[variant]
    reference, memories, optimizer_rows = run_case(tmp_path, case, optimizer_name, **settings)
    with open_trace(tmp_path / "trace") as trace:
        assert trace.complete and trace.validate() == []
        events = trace.sql("SELECT seq, op, grad_enabled, args, kwargs FROM events ORDER BY seq")
        uses = trace.sql(
            f"""SELECT u.seq, u.k, u.role, u.position, u.name, u.item, {', '.join('t.' + c for c in TENSOR_COLUMNS)}
                FROM event_tensors u JOIN tensors t USING (tensor_id, rank) ORDER BY u.seq, u.k"""
        )
        stats = trace.sql("SELECT seq, stat, value FROM op_stats")
        tensor_nnz = trace.sql(
            "SELECT u.seq, u.position, t.shape, t.nnz, t.is01 FROM event_tensors u JOIN tensors t USING (tensor_id, rank) "
            "WHERE u.role = 'arg'"
        )
        module_memories = trace.sql(
            """SELECT m.seq, m.name, m.kind, t.shape, t.storage_ptr, m.value FROM neuron_memories m
               JOIN module_events e USING (seq, module_id, rank) LEFT JOIN tensors t USING (tensor_id, rank)
               WHERE e.kind = 'forward_post' ORDER BY m.seq, m.name"""
        )
        optimizer_table = trace.sql(
            "SELECT shape, has_grad, state_keys FROM optimizer_steps ORDER BY seq, group_index, param_index")
        forward_pairs = trace.sql("SELECT kind, count(*) AS n FROM module_events GROUP BY kind")
        packed = trace.sql("SELECT p.seq, p.bits, t.is01 FROM packed_inputs p JOIN tensors t USING (tensor_id, rank) "
                           "ORDER BY p.seq, p.position")

    assert list(events["op"]) == [op["op"] for op in reference.ops]
    assert list(events["grad_enabled"]) == [op["grad_enabled"] for op in reference.ops]
    by_seq = {seq: group for seq, group in uses.groupby("seq")}
    for seq, op in zip(events["seq"], reference.ops):
        group = by_seq.get(seq)
        recorded = [] if group is None else group.to_dict("records")
        assert len(recorded) == len(op["tensors"]), op["op"]
        for row, expected in zip(recorded, op["tensors"]):
            for column in ["role", "name"] + TENSOR_COLUMNS:
                got = row[column]
                got = list(got) if column in ("shape", "stride") else _null(got)
                assert got == expected[column], (op["op"], column)
            for column in ("position", "item"):
                got = _null(row[column])
                got = None if got is None else int(got)
                assert got == expected[column], (op["op"], column)
        shapes = [tuple(t["shape"]) for t in op["tensors"]]
        decoded_args = _decode(json.loads(events.loc[events.seq == seq, "args"].item()), shapes)
        decoded_kwargs = {k: _decode(v, shapes) for k, v in json.loads(events.loc[events.seq == seq, "kwargs"].item()).items()}
        assert decoded_args == op["args"] and decoded_kwargs == op["kwargs"], op["op"]

    # Per-op statistics reproduce SpikingJelly's AC value for every synaptic op.
    stat_map = {(int(s), name): v for s, name, v in zip(stats["seq"], stats["stat"], stats["value"])}
    arg_stats = {(int(s), int(p)): (tuple(shape), n, b) for s, p, shape, n, b in
                 zip(tensor_nnz["seq"], tensor_nnz["position"], tensor_nnz["shape"], tensor_nnz["nnz"], tensor_nnz["is01"])}
    checked = 0
    for seq, op in zip(events["seq"], reference.ops):
        if op["ac"] is None:
            continue
        assert _ac_from_trace(int(seq), op, stat_map, arg_stats) == op["ac"], op["op"]
        checked += 1
    assert checked > 0

    # Neuron memories after each forward equal the module's real memories at that moment.
    recorded_memories = [
        (list(shape), int(ptr)) if kind == "tensor" else value
        for kind, shape, ptr, value in zip(module_memories["kind"], module_memories["shape"],
                                           module_memories["storage_ptr"], module_memories["value"])
    ]
    expected_memories = [v for snapshot in memories for _, v in sorted(snapshot.items())]
    assert recorded_memories == expected_memories

    expected_optimizer = [(shape, has_grad, keys) for shape, has_grad, keys in optimizer_rows]
    got_optimizer = [(list(s), bool(g), list(k)) for s, g, k in
                     zip(optimizer_table["shape"], optimizer_table["has_grad"], optimizer_table["state_keys"])]
    assert got_optimizer == expected_optimizer
    if settings.get("keep_binary_inputs"):
        # Deferred capture packs every synaptic input; the binary ones must equal the real bits.
        recorded_bits = [bytes(b) for b, is01 in zip(packed["bits"], packed["is01"]) if is01]
        assert recorded_bits == [bits for op in reference.ops for bits in op["packed"]]
        assert recorded_bits
    else:
        assert packed.empty
    kinds = dict(zip(forward_pairs["kind"], forward_pairs["n"]))
    assert kinds["forward_pre"] == kinds["forward_post"] > 0
    if optimizer_name:
        assert kinds["backward_pre"] > 0 and kinds["backward_post"] > 0


def _ac_from_trace(seq, op, stat_map, arg_stats) -> int:
    """SpikingJelly's ACCounter value for a synaptic op, from trace facts only (spec 2.4)."""
    name = op["op"]
    if name == "aten.convolution.default":
        (x_shape, x_nnz, x_bin), (w_shape, w_nnz, w_bin) = arg_stats[(seq, 0)], arg_stats[(seq, 1)]
        transposed, groups = op["args"][6], op["args"][8]
        if x_bin and w_bin:
            return int(stat_map[(seq, "conv_both_binary_sum")])
        if x_bin:
            return spikingjelly_conv_value(int(stat_map[(seq, "conv_spike_taps")]), w_shape, transposed, groups)
        if w_bin:
            out_shape = op["tensors"][-1]["shape"]
            ref = x_shape if transposed else out_shape
            return w_nnz * ref[0] * int(torch.tensor(ref[2:]).prod())
        return 0
    offset = 1 if name in ("aten.addmm.default", "aten.baddbmm.default") else 0
    (x_shape, x_nnz, x_bin), (y_shape, y_nnz, y_bin) = arg_stats[(seq, offset)], arg_stats[(seq, offset + 1)]
    batched = name in ("aten.bmm.default", "aten.baddbmm.default")
    if x_bin and y_bin:
        return int(stat_map[(seq, "mm_out_sum" if offset == 0 else "marginal_dot")])
    if offset and op["kwargs"].get("alpha", 1) != 1:
        return 0
    if x_bin:
        return x_nnz * y_shape[2 if batched else 1]
    if y_bin:
        return y_nnz * x_shape[1 if batched else 0]
    return 0


def test_trace_sizes_are_recorded_in_manifest(tmp_path):
    run_case(tmp_path, CASES[0], "sgd_momentum")
    with open_trace(tmp_path / "trace") as trace:
        counts = trace.manifest["counts"]
        for table in ("events", "tensors", "module_events", "stage_markers", "optimizer_steps"):
            assert counts[table] == trace.count(table) > 0
        assert trace.manifest["steps_recorded"] == 2
        stage_rows = trace.sql("SELECT name, phase, phase_source FROM stages ORDER BY begin_seq")
    assert Counter(zip(stage_rows["name"], stage_rows["phase"], stage_rows["phase_source"])) == Counter(
        {("forward", "forward", "inferred"): 2, ("backward", "backward", "inferred"): 2,
         ("optimizer_update", "optimizer", "inferred"): 2}
    )
