"""Torch's fused transformer fast path counts as the same layer's unfused ops
(analyze/counters/fused_attention.py, docs/deviations.md "Torch's fused transformer ops").

In eval mode under no_grad, nn.TransformerEncoderLayer is one `aten._transformer_encoder_layer_fwd`
and nn.MultiheadAttention (self-attention) one `aten._native_multi_head_attention`. The same
module with `torch.backends.mha.set_fastpath_enabled(False)` runs ordinary ops (mm, addmm, SDPA
or bmm/softmax, layer norm, ...) whose rules are checked elsewhere against SpikingJelly: that
recording is the reference, and every counter must give the fused op its sum.
"""

from __future__ import annotations

import json
from contextlib import contextmanager

import pytest
import torch
from click.testing import CliRunner
from torch import nn

from spiketrace.analyze import open_trace
from spiketrace.analyze.cli import main
from spiketrace.analyze.counters import count
from spiketrace.analyze.counters.fused_attention import ENCODER_LAYER, MULTI_HEAD_ATTENTION
from spiketrace.analyze.energy import energy
from spiketrace.capture import record_inference

NAMES = ["flop", "mac", "memory_access", "ac", "synop"]
B, S, E, H, FF = 2, 5, 16, 2, 32


class Encoder(nn.Module):
    def __init__(self, norm_first=False, activation="relu", key_padding=None, mask=None) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = nn.TransformerEncoderLayer(E, H, FF, batch_first=True, norm_first=norm_first,
                                                activation=activation)
        self.key_padding, self.mask = key_padding, mask

    def forward(self, x):
        return self.layer(x, src_mask=self.mask, src_key_padding_mask=self.key_padding)


class Attention(nn.Module):
    def __init__(self, need_weights=True, average=True, key_padding=None, mask=None) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.attention = nn.MultiheadAttention(E, H, batch_first=True)
        self.need_weights, self.average, self.key_padding, self.mask = need_weights, average, key_padding, mask

    def forward(self, x):
        return self.attention(x, x, x, need_weights=self.need_weights, average_attn_weights=self.average,
                              key_padding_mask=self.key_padding, attn_mask=self.mask)


def floats(*shape, seed=1):
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed))


def spikes(*shape, seed=2):
    return (floats(*shape, seed=seed) < 0.3).float()


PADDING = torch.tensor([[False] * S, [False] * 3 + [True] * 2])
CAUSAL = torch.triu(torch.ones(S, S, dtype=torch.bool), 1)
# name -> (module, input): both activations, both norm orders, a spike input (the projection's
# ACs), B = 1 (the unfused in-projection is one addmm there), one token (Sk = 1: binary
# attention weights), attention weights averaged or not or not asked for, a key padding mask
CONFIGS = {
    "encoder-relu": (lambda: Encoder(), floats(B, S, E)),
    "encoder-gelu": (lambda: Encoder(activation="gelu"), floats(B, S, E)),
    "encoder-norm-first-relu": (lambda: Encoder(norm_first=True), floats(B, S, E)),
    "encoder-norm-first-gelu": (lambda: Encoder(norm_first=True, activation="gelu"), floats(B, S, E)),
    "encoder-spikes": (lambda: Encoder(), spikes(B, S, E)),
    "encoder-one-sequence": (lambda: Encoder(), floats(1, S, E)),
    "encoder-padding": (lambda: Encoder(key_padding=PADDING), floats(B, S, E)),
    "attention": (lambda: Attention(), floats(B, S, E)),
    "attention-per-head": (lambda: Attention(average=False), floats(B, S, E)),
    "attention-no-weights": (lambda: Attention(need_weights=False), floats(B, S, E)),
    "attention-spikes": (lambda: Attention(), spikes(B, S, E)),
    "attention-one-token": (lambda: Attention(), floats(B, 1, E)),
    "attention-padding": (lambda: Attention(key_padding=PADDING), floats(B, S, E)),
}


@contextmanager
def fast_path(enabled: bool):
    saved = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(enabled)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(saved)


def record_both(root, name, make, x, reference="fast path off"):
    """(fused, unfused) traces of one module on one input: eval under no_grad, then the
    reference: the fast path off, or training mode with dropout 0."""
    model = make().eval()
    fused = record_inference(root / f"{name}-fused", model, x)
    if reference == "training":
        for module in model.modules():
            if isinstance(module, nn.Dropout):
                module.p = 0.0
            if isinstance(module, nn.MultiheadAttention):
                module.dropout = 0.0
        record_inference(root / f"{name}-unfused", model.train(), x)
    else:
        with fast_path(False):
            record_inference(root / f"{name}-unfused", model, x)
    return fused, root / f"{name}-unfused"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    root, cache = tmp_path_factory.mktemp("fused"), {}

    def get(name):
        if name not in cache:
            cache[name] = record_both(root, name, *CONFIGS[name])
        return cache[name]
    return get


def ops_of(path) -> set[str]:
    with open_trace(path) as trace:
        return set(trace.sql("SELECT DISTINCT op FROM events")["op"])


def by_scope(path, counters=NAMES, **options):
    with open_trace(path) as trace:
        result = count(trace, counters, **options)
    return ({c: {scope: sum(ops.values()) for scope, ops in result.spikingjelly(c).items()} for c in counters},
            result)


def at_the_layer(counts: dict, reference: dict) -> dict:
    """The reference's counts at the scopes of the fused trace: the layer and its ancestors (the
    fused op runs the layer's submodules without calling them; the unfused ops are attributed
    to them, and add up in the layer's scope)."""
    assert all(set(counts[c]) <= set(reference[c]) for c in counts)
    return {c: {scope: reference[c][scope] for scope in counts[c]} for c in counts}


@pytest.mark.parametrize("name", CONFIGS)
def test_fused_op_counts_as_the_unfused_layer(recorded, name):
    fused, unfused = recorded(name)
    fused_op = ENCODER_LAYER if name.startswith("encoder") else MULTI_HEAD_ATTENTION
    assert fused_op in ops_of(fused) and not {"aten.mm.default", "aten.addmm.default"} & ops_of(fused)
    assert fused_op not in ops_of(unfused)
    got, result = by_scope(fused)
    expected, reference = by_scope(unfused)
    assert got == at_the_layer(got, expected)
    # the fused op is covered by every counter; the reference's views (transpose, permute,
    # _unsafe_view) are memory_access's only uncovered ops, and they move no bytes (a padding
    # mask's conversion to -inf, masked_fill_, runs before the fused op as well, in both traces)
    for counter in NAMES:
        assert set(result.unsupported_of(counter)) <= {"aten.masked_fill_.Scalar"}
        assert set(reference.unsupported_of(counter)) <= {"aten.transpose.int", "aten.permute.default",
                                                          "aten._unsafe_view.default", "aten.masked_fill_.Scalar"}
    if "padding" not in name:
        assert result.coverage("flop") == result.coverage("mac") == 1.0


@pytest.mark.parametrize("name", ["encoder-relu", "encoder-norm-first-gelu", "attention", "attention-no-weights"])
def test_equal_to_the_training_mode_counts(tmp_path, name):
    # "the same layer's counts in training mode": train() with dropout 0, under no_grad
    fused, unfused = record_both(tmp_path, name, *CONFIGS[name], reference="training")
    got = by_scope(fused)[0]
    assert got == at_the_layer(got, by_scope(unfused)[0])


def test_encoder_layer_by_hand(recorded):
    # TransformerEncoderLayer(d=16, h=2, ff=32) on (B=2, S=5, 16): T = 10 tokens, N = T * d = 160
    # values, head dim 8. FLOPs (a product 2 per multiply-add):
    #   in-projection mm 2 * T * d * 3d = 15360, its bias add T * 3d = 480
    #   attention (SDPA) 2 * B * h * S * S * (8 + 8) = 3200
    #   out-projection addmm 2 * T * d * d + T * d = 5280
    #   two residual adds 2 * 160 = 320; two layer norms 2 * (5n + 4G + n + n) = 2 * 1160 = 2320
    #   linear1 2 * T * d * ff + T * ff = 10560, relu T * ff = 320, linear2 2 * T * ff * d + T * d = 10400
    #   -> 48240
    # MACs: in-projection T * d * 3d = 7680, attention q @ k^T and weights @ v 2 * B * h * S * S * 8
    #   = 1600, out-projection T * d * d = 2560, FFN 2 * T * d * ff = 10240, the norms' weights
    #   2 * 160 = 320 -> 22400
    # ACs: the bias add 480, residual adds 320, layer norms 2 * 3n = 960 -> 1760; SynOps 0
    # Bytes (float32): input copy 2N + mm (N + w 3072 B + 3N) + add (3N + b 192 B + 3N) + head
    #   copy 6N + SDPA 4N + out-projection (w 1024 + b 64 + 2N) + residuals 6N + norms 2 * (2N +
    #   w 64 + b 64 + mean/rstd 2 * T * 4) + linear1 (w 2048 + b 128 + N + T * ff) + relu 2 T ff
    #   + linear2 (w 2048 + b 64 + T ff + N) = 37216
    fused, _ = recorded("encoder-relu")
    got, _ = by_scope(fused)
    assert [got[c]["Encoder.layer"] for c in NAMES] == [48240, 22400, 37216, 1760, 0]


def test_multi_head_attention_by_hand(recorded):
    # MultiheadAttention(16, 2) self-attention on (2, 5, 16), weights averaged over heads:
    # FLOPs in-projection 15360 + 480, q * scale 160, q @ k^T 1600, softmax 4 * B*h*S*S = 400,
    # weights @ v 1600, out-projection 5280, the mean over heads 100 -> 24980
    # MACs 7680 + 800 + 800 + 2560 = 11840; ACs the bias add 480 + the mean's 100 - 50 -> 530
    fused, _ = recorded("attention")
    got, _ = by_scope(fused)
    assert [got[c]["Attention.attention"] for c in ("flop", "mac", "ac", "synop")] == [24980, 11840, 530, 0]


def test_spike_input_and_one_key(recorded):
    # a binary src: the in-projection multiplies nothing; each of its 45 spikes reaches 3d = 48
    # outputs: 2160 SynOps. One token: the attention weights are all 1 (binary), so weights @ v
    # is B * h * 1 * 8 = 32 accumulates, no MAC.
    got, _ = by_scope(recorded("encoder-spikes")[0])
    assert got["synop"]["Encoder.layer"] == 45 * 48 and got["mac"]["Encoder.layer"] == 22400 - 7680
    got, _ = by_scope(recorded("attention-one-token")[0])
    assert got["synop"]["Attention.attention"] == 32


def test_counts_strict_passes_on_the_fused_traces(recorded):
    for name in ("encoder-relu", "attention"):
        result = CliRunner().invoke(main, ["counts", str(recorded(name)[0]), "--strict", "--format", "json"])
        assert result.exit_code == 0, result.output
        document = json.loads(result.stdout)["counters"]
        assert all(document[c]["unsupported"] == {} for c in NAMES)


def test_an_attention_mask_is_read_at_the_fused_ops_shape(tmp_path):
    # merge_masks expands a (S, S) attn_mask to (B, h, S, S) for the fused op; the unfused path
    # reads it as (1, S, S): (B * h - 1) * S * S floats more. Every other count is equal.
    for make in (lambda: Encoder(mask=CAUSAL), lambda: Attention(mask=CAUSAL)):
        fused, unfused = record_both(tmp_path / str(id(make)), "masked", make, floats(B, S, E))
        got = by_scope(fused)[0]
        expected = at_the_layer(got, by_scope(unfused)[0])
        for counter in ("flop", "mac", "ac", "synop"):
            assert got[counter] == expected[counter], counter
        assert got["memory_access"]["Global"] - expected["memory_access"]["Global"] == (B * H - 1) * S * S * 4


def test_values_the_trace_lacks_leave_the_value_counts_unknown(tmp_path):
    # an all-zero input makes every intermediate constant, a 0/1 weight matrix makes products
    # 0/1: MACs, ACs and SynOps depend on those values, so they are reported, not guessed;
    # FLOPs and bytes depend on shapes only
    binary_weight = Encoder()
    with torch.no_grad():
        binary_weight.layer.linear1.weight.copy_(spikes(FF, E, seed=3))
    for name, model, x in (("zeros", Encoder(), torch.zeros(B, S, E)), ("binary-weight", binary_weight, floats(B, S, E))):
        got, result = by_scope(record_inference(tmp_path / name, model.eval(), x))
        for counter in ("mac", "ac", "synop"):
            assert ENCODER_LAYER in result.unsupported_of(counter), (name, counter)
        assert got["flop"]["Global"] == 48240 and ENCODER_LAYER not in result.unsupported_of("memory_access")


def test_compat_leaves_the_fused_ops_uncovered(recorded):
    _, result = by_scope(recorded("attention")[0], ["flop", "mac"], compat="spikingjelly")
    assert MULTI_HEAD_ATTENTION in result.unsupported_of("flop") and MULTI_HEAD_ATTENTION in result.unsupported_of("mac")


@pytest.mark.parametrize("name", ["encoder-relu", "encoder-norm-first-gelu", "encoder-spikes", "attention"])
def test_compute_energy_equals_the_unfused_layers(recorded, name):
    # forward only: MACs, ACs and the Linear modules' weight and bias reads, which the fused
    # encoder layer makes for its linear1 and linear2 without calling them
    reports = []
    for path in recorded(name):
        with open_trace(path) as trace:
            reports.append(energy(trace, model="compute"))
    fused, unfused = reports
    assert fused.counts == unfused.counts and fused.energy_total_pj == pytest.approx(unfused.energy_total_pj)
    layer = {scope: pj for scope, pj in unfused.energy_by_module.items() if scope.count(".") < 2}
    assert {scope: pj for scope, pj in fused.energy_by_module.items() if scope.count(".") < 2} == pytest.approx(layer)
    assert fused.counts["mac"] > 0


def test_models_that_do_not_cost_the_fused_ops_say_so(recorded):
    # paper and chip cost synaptic layers from their operands' spikes, lemaire and spikesim the
    # Linear calls the fused layer never makes, neuromc fragments: none costs the fused op, and
    # each names it rather than reporting a silent 0
    fused, _ = recorded("encoder-relu")
    with open_trace(fused) as trace:
        for model in ("paper", "chip", "lemaire", "spikesim"):
            assert any(ENCODER_LAYER in warning for warning in energy(trace, model=model).warnings), model
        assert ENCODER_LAYER in set(energy(trace, model="neuromc").uncosted["name"])
