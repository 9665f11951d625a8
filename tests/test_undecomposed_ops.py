"""Composite ops recorded whole (aten.conv2d, aten.linear, aten.batch_norm, aten.layer_norm,
aten.scaled_dot_product_attention, ...) count as the ops they decompose into
(analyze/counters/undecomposed.py), in every counter.

Capture decomposes them while recording (capture/ops/decompositions.py); here its table of
decompositions is told to record them as they come, as a backend that dispatches them
would, and the same model is captured both ways under torch.inference_mode().
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext

import pytest
import torch
import torch.nn.functional as F
from spikingjelly.activation_based.op_counter import (
    ACCounter,
    DispatchCounterMode,
    FlopCounter,
    MACCounter,
    MemoryAccessCounter,
    SynOpCounter,
)
from torch import nn
from torch.overrides import resolve_name

from spiketrace.analyze import open_trace
from spiketrace.analyze.counters import count
from spiketrace.capture import Recorder
from spiketrace.capture.ops import decompositions

aten = torch.ops.aten
NAMES = ["flop", "memory_access", "mac", "ac", "synop"]
WHOLE_OPS = [aten.conv1d.default, aten.conv2d.default, aten.conv2d.padding, aten.conv3d.default,
             aten.linear.default, aten.batch_norm.default, aten.layer_norm.default,
             aten.scaled_dot_product_attention.default]


@contextmanager
def recorded_whole():
    """Capture records the composite ops as they come instead of decomposing them."""
    saved = dict(decompositions._decompositions)
    decompositions._decompositions.update({op: None for op in WHOLE_OPS})
    try:
        yield
    finally:
        decompositions._decompositions.clear()
        decompositions._decompositions.update(saved)


def binary(*shape, seed=0):
    return (torch.rand(*shape, generator=torch.Generator().manual_seed(seed)) < 0.4).float()


def zero_one_weight(layer: nn.Module, seed: int = 1) -> nn.Module:
    with torch.no_grad():
        layer.weight.copy_(binary(*layer.weight.shape, seed=seed))
    return layer


class Attention(nn.Module):
    def forward(self, q, k, v, mask=None, causal=False):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)


class Layers(nn.Module):
    """One module per composite op, each on the operands its rules tell apart."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(2, 4, 3, stride=2, padding=1)  # analog x: MACs
        self.spike_conv = nn.Conv2d(2, 3, 3, padding=1, bias=False)  # binary x: spike taps
        self.grouped = nn.Conv1d(4, 4, 3, stride=2, groups=2)  # binary x, groups
        self.same = nn.Conv2d(2, 2, 3, padding="same", dilation=2)  # string padding, symmetric
        self.binary_weight = zero_one_weight(nn.Conv3d(1, 2, 2))  # only w binary
        self.both_binary = zero_one_weight(nn.Conv2d(2, 2, 3, padding=1))  # x and w binary
        self.bn_train, self.bn_eval = nn.BatchNorm2d(4), nn.BatchNorm2d(4).eval()
        self.fc = nn.Linear(5, 3)  # 3-D analog x, bias: addmm after a view
        self.fc_plain = nn.Linear(5, 3, bias=False)  # 2-D binary x: mm
        self.fc_binary_weight = zero_one_weight(nn.Linear(5, 3))  # only w binary
        self.fc_both = zero_one_weight(nn.Linear(5, 3, bias=False))  # both binary
        self.attention, self.masked, self.causal = Attention(), Attention(), Attention()

    def forward(self, image, spikes, sequence, volume, tokens, q):
        y = self.bn_eval(self.bn_train(self.conv(image)))
        self.spike_conv(spikes)
        self.grouped(binary(2, 4, 9, seed=3))
        self.same(image)
        self.binary_weight(volume)
        self.both_binary(spikes)
        self.fc(sequence)
        self.fc_plain(tokens)
        self.fc_binary_weight(sequence)
        self.fc_both(tokens)
        self.attention(q, q * 0.5, q + 1)
        self.masked(q, q, q, mask=torch.rand(4, 4, generator=torch.Generator().manual_seed(5)))
        self.causal(q, q, q, causal=True)
        return y


class Norms(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln, self.ln_plain = nn.LayerNorm(5), nn.LayerNorm([2, 5], elementwise_affine=False)

    def forward(self, sequence):
        return self.ln(sequence) + self.ln_plain(sequence)


def inputs():
    gen = torch.Generator().manual_seed(7)
    return (torch.rand(2, 2, 5, 5, generator=gen) + 0.1, binary(2, 2, 5, 5, seed=4), torch.rand(2, 4, 5, generator=gen),
            torch.rand(1, 1, 3, 3, 3, generator=gen), binary(6, 5, seed=6), torch.rand(1, 2, 4, 8, generator=gen))


def capture(path, model, args, whole: bool):
    with recorded_whole() if whole else nullcontext():
        with Recorder(path, model=model) as recorder, torch.inference_mode(), recorder.stage("forward"):
            model(*args)
    return path


def by_scope(result, counter) -> dict[str, int]:
    return {scope: sum(ops.values()) for scope, ops in result.spikingjelly(counter).items()}


def ops_of(trace) -> set[str]:
    return set(trace.sql("SELECT DISTINCT op FROM events")["op"])


@pytest.fixture(scope="module")
def both_forms(tmp_path_factory):
    root = tmp_path_factory.mktemp("undecomposed")
    model = Layers()
    return capture(root / "decomposed", model, inputs(), False), capture(root / "whole", model, inputs(), True)


def test_the_whole_trace_holds_the_composite_ops(both_forms):
    decomposed, whole = both_forms
    with open_trace(whole) as trace:
        assert {"aten.conv1d.default", "aten.conv2d.default", "aten.conv2d.padding", "aten.conv3d.default",
                "aten.linear.default", "aten.batch_norm.default",
                "aten.scaled_dot_product_attention.default"} <= ops_of(trace)
        assert "aten.convolution.default" not in ops_of(trace)
    with open_trace(decomposed) as trace:
        assert not {"aten.conv2d.default", "aten.linear.default"} & ops_of(trace)


@pytest.mark.parametrize("counter", NAMES)
def test_every_module_counts_the_same_whole_or_decomposed(both_forms, counter):
    decomposed, whole = both_forms
    with open_trace(decomposed) as trace:
        expected = count(trace, [counter])
    with open_trace(whole) as trace:
        result = count(trace, [counter])
    assert by_scope(result, counter) == by_scope(expected, counter)
    # every module with work of the counter's kind counts it, none as a silent zero
    assert sum(by_scope(result, counter).values()) > 0
    # no composite op is left to "unknown" where its decomposition has a rule (SDPA's MAC, AC
    # and SynOp rules, beyond SpikingJelly's, are its two products': analyze/counters/fused_attention.py)
    uncovered = set(result.unsupported_of(counter))
    assert not uncovered & {resolve_name(op) for op in WHOLE_OPS}


def test_layer_norm_whole_or_decomposed(tmp_path):
    model, sequence = Norms(), torch.rand(3, 2, 5)
    decomposed = capture(tmp_path / "d", model, (sequence,), False)
    whole = capture(tmp_path / "w", model, (sequence,), True)
    with open_trace(decomposed) as trace:
        expected = count(trace, NAMES)
        assert "aten.native_layer_norm.default" in ops_of(trace)
    with open_trace(whole) as trace:
        result = count(trace, NAMES)
        assert "aten.layer_norm.default" in ops_of(trace)
    for counter in ("flop", "memory_access", "mac", "ac"):
        assert by_scope(result, counter) == by_scope(expected, counter), counter
    # by hand, Norms.ln: n = 30 elements in G = 6 rows of 5, weight and bias:
    # FLOPs 5n + 4G + n + n = 150 + 24 + 60 = 234; MACs n = 30 (the weight's products);
    # ACs 3n = 90; bytes: x 120 + w 20 + b 20 + out 120 + mean and rstd 2 * 6 * 4 = 48 -> 328.
    # Norms.ln_plain: normalized_shape (2, 5), G = 3 rows of 10, no weight or bias:
    # FLOPs 150 + 12 = 162, MACs 0, ACs 90, bytes 120 + 120 + 2 * 3 * 4 = 264.
    values = {c: by_scope(result, c) for c in ("flop", "mac", "ac", "memory_access")}
    assert [values[c]["Norms.ln"] for c in ("flop", "mac", "ac", "memory_access")] == [234, 30, 90, 328]
    assert [values[c]["Norms.ln_plain"] for c in ("flop", "ac", "memory_access")] == [162, 90, 264]
    assert values["mac"].get("Norms.ln_plain", 0) == 0


def test_hand_formulas_of_the_whole_ops(tmp_path):
    conv = nn.Conv2d(2, 3, 3, stride=2, padding=1)
    fc = nn.Linear(5, 3)
    spikes = torch.zeros(1, 2, 5, 5)
    spikes[0, 0, 1, 1] = spikes[0, 1, 2, 2] = 1.0
    tokens = torch.tensor([[1.0, 0, 0, 1, 0], [0, 0, 1, 0, 0]])
    with recorded_whole(), Recorder(tmp_path / "t") as recorder, torch.inference_mode(), recorder.stage("forward"):
        conv(spikes)
        fc(tokens)
    with open_trace(tmp_path / "t") as trace:
        result = count(trace, NAMES)
    got = {c: result.spikingjelly(c)["Global"] for c in NAMES}
    # conv2d: out (1, 3, 3, 3), 27 elements; 2 * C_in * K * numel(out) + numel(out) for the bias
    assert got["flop"]["aten.conv2d.default"] == 2 * 2 * 9 * 27 + 27
    assert got["mac"]["aten.conv2d.default"] == 0  # binary input: no multiplies
    # Input 5, kernel 3, stride 2, padding 1: outputs 0..2 read inputs 2o-1..2o+1, so the
    # positions are read cov = [1, 2, 1, 2, 1] times. Spikes at (1, 1) (2 * 2 = 4 taps) and
    # (2, 2) (1 * 1 = 1 tap): 5 taps, each feeding C_out = 3 output channels.
    assert got["ac"]["aten.conv2d.default"] == got["synop"]["aten.conv2d.default"] == 5 * 3
    # bytes: x 50 + w 54 + out 27 + bias 3 = 134 float32 values
    assert got["memory_access"]["aten.conv2d.default"] == 134 * 4
    # linear: x (2, 5) with 3 spikes, w (3, 5), bias: 2mnk + mn = 60 + 6 FLOPs, 3 spikes * 3 outputs ACs
    assert got["flop"]["aten.linear.default"] == 2 * 2 * 3 * 5 + 2 * 3
    assert got["mac"]["aten.linear.default"] == 0
    assert got["ac"]["aten.linear.default"] == got["synop"]["aten.linear.default"] == 3 * 3
    assert got["memory_access"]["aten.linear.default"] == (10 + 15 + 6 + 3) * 4


def test_whole_ops_equal_spikingjelly_on_their_decomposition(tmp_path):
    """SpikingJelly counts the decomposed ops (no_grad gives it aten.convolution, aten.addmm,
    aten.native_batch_norm and the CPU flash attention); the whole ops give its numbers, but for
    the attention's MACs and ACs, which SpikingJelly does not count (no rule for SDPA)."""
    model, args = Layers(), inputs()
    counters = [FlopCounter(), MemoryAccessCounter(), MACCounter(), ACCounter(), SynOpCounter()]
    with DispatchCounterMode(counters), torch.no_grad():
        model(*args)
    expected = {name: {scope: sum(int(v) for v in ops.values()) for scope, ops in c.get_counts().items()}
                for name, c in zip(NAMES, counters)}
    # SDPA's two products (analyze/counters/fused_attention.py) on q (1, 2, 4, 8), k, v alike, no
    # operand binary: rows 8 * sk 4 * (d 8 + dv 8) = 512 MACs per call, 0 ACs (sk > 1)
    for scope in ("Layers.attention", "Layers.masked", "Layers.causal"):
        expected["mac"][scope] = 512
        expected["ac"][scope] = expected["synop"][scope] = 0
    for name, extra in (("mac", 3 * 512), ("ac", 0), ("synop", 0)):
        for scope in ("Global", "Layers"):
            expected[name][scope] += extra
    with open_trace(capture(tmp_path / "t", model, inputs(), True)) as trace:
        result = count(trace, NAMES)
    for name in NAMES:
        assert by_scope(result, name) == expected[name], name


def test_even_kernel_same_padding(tmp_path):
    """padding='same' with an even kernel: the decomposition pads a copy of x by what the two
    sides differ, then convolves it. Every count but memory traffic is the same; the whole op reads x, the
    decomposition reads the padded copy (and the pad op itself has no memory rule)."""
    model = nn.Sequential(nn.Conv2d(2, 3, 4, padding="same"))
    x = binary(2, 2, 5, 5, seed=2)
    decomposed, whole = capture(tmp_path / "d", model, (x,), False), capture(tmp_path / "w", model, (x,), True)
    with open_trace(decomposed) as trace:
        expected = count(trace, NAMES)
        assert "aten.constant_pad_nd.default" in ops_of(trace)
    with open_trace(whole) as trace:
        result = count(trace, NAMES)
    for name in ("flop", "mac", "ac", "synop"):
        assert by_scope(result, name) == by_scope(expected, name), name
    # total padding 3 per dim, 1 left and 2 right: the conv pads 1 on each side itself and the
    # copy adds the extra one on the right, (2, 2, 6, 6) instead of (2, 2, 5, 5)
    padded_extra = (2 * 2 * 6 * 6 - 2 * 2 * 5 * 5) * 4
    assert by_scope(expected, "memory_access")["Global"] - by_scope(result, "memory_access")["Global"] == padded_extra


def test_compat_mode_leaves_the_whole_ops_uncounted_as_spikingjelly_does(both_forms):
    _, whole = both_forms
    with open_trace(whole) as trace:
        result = count(trace, ["flop", "mac"], compat="spikingjelly")
    assert "aten.linear.default" in result.unsupported_of("flop")
    assert "aten.conv2d.default" in result.unsupported_of("mac")
