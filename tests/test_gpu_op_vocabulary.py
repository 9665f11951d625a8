"""The ops a GPU run dispatches and a CPU run never shows (analyze/counters/device_ops.py),
recorded on this CPU-only machine and counted.

Each op is recorded through its meta kernel (`device="meta"` tensors: shapes, no values) or
its CPU kernel where torch has one (fused optimizers, GradScaler's ops), then counted and
compared with torch.utils.flop_counter (FLOPs, where it has a formula), with the CPU twin the
op stands for (batch norm, the unfused optimizer step) and with counts worked out here.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from click.testing import CliRunner
from torch.utils.flop_counter import FlopCounterMode

from spiketrace.analyze import open_trace
from spiketrace.analyze.cli import main
from spiketrace.analyze.counters import count
from spiketrace.capture import Recorder

aten = torch.ops.aten
NAMES = ["flop", "memory_access", "mac", "ac", "synop"]


def meta(*shape, dtype=torch.float32):
    return torch.empty(*shape, device="meta", dtype=dtype)


def record(path, fn, stage="forward"):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with Recorder(path) as recorder, recorder.stage(stage):
            fn()
    return path


def global_counts(path, counters=NAMES, **options):
    with open_trace(path) as trace:
        result = count(trace, counters, **options)
    return {c: result.spikingjelly(c).get("Global", {}) for c in counters}, result


# -- attention: torch's FLOP formulas, the byte rule of the CPU flash attention ----------------

Q, K, V = (2, 4, 8, 16), (2, 4, 6, 16), (2, 4, 6, 16)  # b=2, h=4, sq=8, sk=6, d=dv=16


def _attention_calls():
    q, k, v = meta(*Q), meta(*K), meta(*V)
    out, lse, seed, offset = aten._scaled_dot_product_efficient_attention(q, k, v, None, True)
    aten._scaled_dot_product_efficient_attention_backward(out, q, k, v, None, out, lse, seed, offset, 0.0,
                                                          [True, True, True, False])
    f = aten._scaled_dot_product_flash_attention(q, k, v)
    aten._scaled_dot_product_flash_attention_backward(f[0], q, k, v, f[0], f[1], f[2], f[3], f[4], f[5], 0.0, False,
                                                      f[6], f[7])
    c = aten._scaled_dot_product_cudnn_attention(q, k, v, None, True)
    aten._scaled_dot_product_cudnn_attention_backward(c[0], q, k, v, c[0], c[1], c[6], c[7], meta(0), c[2], c[3],
                                                      c[4], c[5], 0.0, False)


def test_attention_flops_equal_torch_flop_counter(tmp_path):
    with FlopCounterMode(display=False) as oracle:
        _attention_calls()
    expected = {f"{op}.default": n for op, n in oracle.get_flop_counts()["Global"].items()}
    counts, _ = global_counts(record(tmp_path / "t", _attention_calls), ["flop", "memory_access"], strict=True)
    assert {op: counts["flop"][op] for op in expected} == expected
    # by hand: forward 2 * b*h * sq * sk * (d + dv) = 2 * 8 * 8 * 6 * 32 = 24576; backward
    # 2 * b*h * sq * sk * (3d + 2dv) = 2 * 8 * 48 * 80 = 61440
    assert set(expected.values()) == {24576, 61440}
    # bytes: q 4096 + k 3072 + v 3072 + out 4096 (float32), no bias
    assert counts["memory_access"]["aten._scaled_dot_product_efficient_attention.default"] == 14336
    # backward: grad_out, q, k, v read, grad_q, grad_k, grad_v written (grad_bias: none asked)
    assert counts["memory_access"]["aten._scaled_dot_product_flash_attention_backward.default"] == 4096 * 3 + 3072 * 4


def test_attention_on_meta_tensors_has_no_synaptic_count(tmp_path):
    # the forward ops' MAC/AC/SynOp rules (their two products, analyze/counters/fused_attention.py)
    # depend on whether q, k, v are spikes, which meta tensors cannot tell; the backward ops have
    # no such rule (as on CPU): all six are reported
    _, result = global_counts(record(tmp_path / "t", _attention_calls), ["mac", "ac", "synop"])
    for counter in ("mac", "ac", "synop"):
        assert len(result.unsupported_of(counter)) == 6


# -- batch norm: cudnn's as native's --------------------------------------------------------

def test_cudnn_batch_norm_counts_as_native(tmp_path):
    shape, c = (4, 3, 5, 5), 3

    def gpu(device_tensor):
        def run():
            x, w, b, rm, rv = device_tensor(*shape), device_tensor(c), device_tensor(c), device_tensor(c), device_tensor(c)
            out = aten.cudnn_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5)
            aten.cudnn_batch_norm(x, w, b, rm, rv, False, 0.1, 1e-5)
            aten.cudnn_batch_norm_backward(x, out[0], w, rm, rv, out[1], out[2], 1e-5, out[3])
        return run

    def cpu():
        x, w, b, rm, rv = torch.randn(*shape), torch.rand(c), torch.rand(c), torch.zeros(c), torch.ones(c)
        out = aten.native_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5)
        aten.native_batch_norm(x, w, b, rm, rv, False, 0.1, 1e-5)
        aten.native_batch_norm_backward(out[0], x, w, rm, rv, out[1], out[2], True, 1e-5, [True, True, True])

    got, result = global_counts(record(tmp_path / "gpu", gpu(meta)))
    twin, _ = global_counts(record(tmp_path / "cpu", cpu))
    pairs = {"aten.cudnn_batch_norm.default": "aten.native_batch_norm.default",
             "aten.cudnn_batch_norm_backward.default": "aten.native_batch_norm_backward.default"}
    for counter in NAMES:
        assert {op: got[counter].get(op) for op in pairs} == {op: twin[counter].get(cpu) for op, cpu in pairs.items()}
    n = 300
    # training forward: n + (2n + 2c) + 2c + 2n + 2n (affine) + 6c (running stats) = 7n + 10c;
    # eval 2c + 2n + 2n; backward (trained, grad_input asked) 2n + (n - c) + (2n - c) + (5n + 2c) = 10n
    assert got["flop"]["aten.cudnn_batch_norm.default"] == (7 * n + 10 * c) + (4 * n + 2 * c)
    assert got["flop"]["aten.cudnn_batch_norm_backward.default"] == 10 * n
    # MACs: n (weight) + 2c (running stats) in training, n in eval
    assert got["mac"]["aten.cudnn_batch_norm.default"] == (n + 2 * c) + n
    # bytes, training: x 1200 + 4 * 12 (w, b, rm, rv) + out 1200 + save_mean, save_var 24 = 2472
    # (cudnn's empty reserve output is not counted); eval 1200 + 48 + 1200 = 2448
    assert got["memory_access"]["aten.cudnn_batch_norm.default"] == 2472 + 2448
    # the backward has no MAC/AC rule, as native_batch_norm_backward has none: reported
    assert set(result.unsupported_of("mac")) == {"aten.cudnn_batch_norm_backward.default"}


# -- dropout ---------------------------------------------------------------------------------

def test_dropout_ops(tmp_path):
    x, mask = meta(4, 3, 5, 5), meta(4, 3, 5, 5, dtype=torch.bool)

    def run():
        aten.native_dropout(x, 0.5, True)
        aten.native_dropout(x, 0.5, False)
        aten._fused_dropout(x, 0.5)
        aten.native_dropout_backward(x, mask, 2.0)
        aten._masked_scale(x, mask, 2.0)

    got, _ = global_counts(record(tmp_path / "t", run), strict=True)
    n = 300
    # x * mask * scale: 2 per element in training, none in eval (a copy)
    assert got["flop"] == {"aten.native_dropout.default": 2 * n, "aten._fused_dropout.default": 2 * n,
                           "aten.native_dropout_backward.default": 2 * n, "aten._masked_scale.default": 2 * n}
    # x read (1200), out (1200) and mask (300 bool) written, per call: 2 native_dropout calls
    assert got["memory_access"]["aten.native_dropout.default"] == 2 * 2700
    assert got["memory_access"]["aten._masked_scale.default"] == 1200 + 300 + 1200


# -- optimizers: fused and multi-tensor steps count as the single-tensor step ------------------

def _step(optimizer, **options):
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(2, 3)), torch.nn.Parameter(torch.randn(5))]  # n = 11
    opt = optimizer(params, **options)
    for _ in range(2):  # the second step is recorded: state exists, momentum buffers too
        for p in params:
            p.grad = torch.randn_like(p)
        if _ == 0:
            opt.step()
    return opt.step


def _total(counts, counter, skip=()):
    return sum(v for op, v in counts[counter].items() if op not in skip)


STEP_INCREMENTS = ("aten._foreach_add_.Scalar", "aten._foreach_add_.Tensor")
OPTIMIZERS = [
    (torch.optim.Adam, {}), (torch.optim.Adam, {"weight_decay": 0.1, "maximize": True}),
    (torch.optim.AdamW, {}), (torch.optim.SGD, {"lr": 0.1}),
    (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.1}),
    (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "dampening": 0.2, "maximize": True}),
    (torch.optim.Adagrad, {"weight_decay": 0.1}),
]


@pytest.mark.parametrize("optimizer, options", OPTIMIZERS, ids=lambda o: getattr(o, "__name__", str(o)))
def test_fused_step_counts_as_the_single_tensor_step(tmp_path, optimizer, options):
    single, _ = global_counts(record(tmp_path / "single", _step(optimizer, foreach=False, **options), "optimizer"))
    fused, result = global_counts(record(tmp_path / "fused", _step(optimizer, fused=True, **options), "optimizer"),
                                  strict=True)
    steps = 2 if optimizer is not torch.optim.SGD else 0  # one step counter += 1 per parameter
    for counter in ("flop", "ac"):
        assert _total(fused, counter, STEP_INCREMENTS) == _total(single, counter) - steps, counter
    assert _total(fused, "mac") == 0 and _total(fused, "synop") == 0


def test_fused_adam_by_hand(tmp_path):
    got, _ = global_counts(record(tmp_path / "t", _step(torch.optim.Adam, fused=True, amsgrad=True), "optimizer"),
                           strict=True)
    n = 11
    # lerp 3 + mul 1 + addcmul 3 + sqrt 1 + div 1 + add 1 + addcdiv 3 = 13, + 1 amsgrad's maximum
    assert got["flop"]["aten._fused_adam_.default"] == 14 * n
    assert got["ac"]["aten._fused_adam_.default"] == 5 * n  # lerp 2, addcmul, add, addcdiv
    # param, exp_avg, exp_avg_sq, max_exp_avg_sq read and written, grad read: 9 * 44 bytes,
    # and the two float32 step tensors
    assert got["memory_access"]["aten._fused_adam_.default"] == 9 * 44 + 2 * 4


@pytest.mark.parametrize("optimizer, options", OPTIMIZERS[:6], ids=lambda o: getattr(o, "__name__", str(o)))
def test_multi_tensor_step_counts_as_the_single_tensor_step(tmp_path, optimizer, options):
    single, _ = global_counts(record(tmp_path / "single", _step(optimizer, foreach=False, **options), "optimizer"))
    multi, _ = global_counts(record(tmp_path / "multi", _step(optimizer, foreach=True, **options), "optimizer"),
                             strict=True)
    for counter in ("flop", "ac"):
        assert _total(multi, counter) == _total(single, counter), counter


def test_grad_scaler_ops(tmp_path):
    w = torch.nn.Parameter(torch.randn(2, 3))
    opt, scaler = torch.optim.SGD([w], lr=0.1), torch.amp.GradScaler("cpu")
    scaler.scale((w * 2).sum()).backward()

    def step():
        scaler.step(opt)
        scaler.update()

    got, _ = global_counts(record(tmp_path / "t", step, "optimizer"), strict=True)
    # unscale: a finiteness test and a product per gradient element; grads (24 bytes) read and
    # written, found_inf and inv_scale (4 bytes each) once. update: 3 FLOPs on one element;
    # scale and growth tracker (4 bytes each) read and written, found_inf read.
    assert got["flop"]["aten._amp_foreach_non_finite_check_and_unscale_.default"] == 2 * 6
    assert got["memory_access"]["aten._amp_foreach_non_finite_check_and_unscale_.default"] == 2 * 24 + 4 + 4
    assert got["flop"]["aten._amp_update_scale_.default"] == 3
    assert got["memory_access"]["aten._amp_update_scale_.default"] == 2 * 4 + 2 * 4 + 4


# -- a GPU-shaped trace is fully costed ----------------------------------------------------------

def test_gpu_shaped_trace_is_fully_costed(tmp_path):
    x, w, b, rm, rv = meta(4, 3, 5, 5), meta(3), meta(3), meta(3), meta(3)
    steps = [_step(torch.optim.AdamW, fused=True), _step(torch.optim.SGD, lr=0.1, momentum=0.9, fused=True),
             _step(torch.optim.Adam, foreach=True)]

    def run():
        aten.cudnn_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5)
        aten.native_dropout(x, 0.5, True)
        for step in steps:
            step()

    path = record(tmp_path / "t", run)
    with open_trace(path) as trace:
        result = count(trace, NAMES, strict=True)
        assert not len(result.unsupported)
    # and the CLI's --strict agrees
    outcome = CliRunner().invoke(main, ["counts", str(path), "--strict"])
    assert outcome.exit_code == 0, outcome.output


# -- what has no values or no rule says so -------------------------------------------------------

def test_meta_operands_leave_value_dependent_counts_unknown(tmp_path):
    x, y = meta(2, 3), meta(3, 4)

    def run():
        x @ y
        x + x

    got, result = global_counts(record(tmp_path / "t", run))
    assert got["flop"] == {"aten.mm.default": 48, "aten.add.Tensor": 6}  # shapes suffice
    # spike or not decides MACs, ACs and SynOps: a meta tensor has no values, so no guess
    for counter in ("mac", "ac", "synop"):
        assert "aten.mm.default" in set(result.unsupported_of(counter)), counter
    assert "aten.add.Tensor" in set(result.unsupported_of("ac"))


def test_spikingjelly_cuda_neuron_is_one_named_op(tmp_path):
    from spikingjelly.activation_based import neuron

    node = neuron.IFNode(step_mode="m")
    # on CUDA (and meta) SpikingJelly 2.0.0 runs its neuron as one registered op, the fused
    # kernel behind it: the trace holds sj_if.forward with its arguments, none of the per-step
    # adds, comparisons and resets a CPU run decomposes into
    x = meta(4, 2, 3)
    path = record(tmp_path / "t", lambda: node(x))
    with open_trace(path) as trace:
        assert "sj_if.forward.default" in set(trace.sql("SELECT DISTINCT op FROM events")["op"])
        result = count(trace, NAMES)
    # sj_if (like lif, plif, qif, eif, izhikevich) counts as its CPU decomposition
    # (tests/test_sj_neuron_ops.py)
    for counter in ("flop", "memory_access", "ac"):
        assert "sj_if.forward.default" not in set(result.unsupported_of(counter)), counter
    # a neuron op without a rule (ILIF's) is named as unknown, never silently 0
    ilif = neuron.ILIFNode(step_mode="m")
    with open_trace(record(tmp_path / "ilif", lambda: ilif(x))) as trace:
        result = count(trace, NAMES)
    for counter in ("flop", "memory_access", "ac"):
        assert "sj_ilif.forward.default" in set(result.unsupported_of(counter)), counter


def test_neuromc_costs_cudnn_batch_norm_as_native_and_compat_as_spikingjelly(tmp_path):
    # A CUDA run's batch norm outside a BatchNorm module (a functional call) is costed by NeuroMC's
    # trace fallback as native_batch_norm is: the same bn.forward / bn.backward fragments, the
    # same energy. cudnn_batch_norm_backward takes (input, grad_output, ...) where native's takes
    # (grad_out, input, ...): the shapes agree, so the layout does. Under --compat spikingjelly
    # they are uncosted, as SpikingJelly has no rule for them.
    from spiketrace.analyze import energy

    shape, c = (4, 3, 5, 5), 3

    def gpu():
        x, w, b, rm, rv = meta(*shape), meta(c), meta(c), meta(c), meta(c)
        out = aten.cudnn_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5)
        aten.cudnn_batch_norm_backward(x, out[0], w, rm, rv, out[1], out[2], 1e-5, out[3])

    def cpu():
        x, w, b, rm, rv = meta(*shape), meta(c), meta(c), meta(c), meta(c)
        out = aten.native_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5)
        aten.native_batch_norm_backward(out[0], x, w, rm, rv, out[1], out[2], True, 1e-5, [True, True, True])

    with open_trace(record(tmp_path / "gpu", gpu)) as trace:
        cudnn = energy(trace, "neuromc")
        compat = energy(trace, "neuromc", compat="spikingjelly")
    with open_trace(record(tmp_path / "cpu", cpu)) as trace:
        native = energy(trace, "neuromc")
    assert cudnn.energy_total_pj > 0 and cudnn.energy_total_pj == pytest.approx(native.energy_total_pj, rel=1e-12)
    assert compat.energy_total_pj == 0
