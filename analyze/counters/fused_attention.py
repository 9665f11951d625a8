"""Attention as products: SDPA's MAC/AC rules, and torch's fused transformer fast path counted
as the same layer's unfused ops (tests/test_fused_transformer_ops.py records both forms).

In eval mode with autograd off (`no_grad`, `inference_mode`), nn.TransformerEncoderLayer and
nn.MultiheadAttention (batch_first, self-attention, even head count) call one op for the whole
layer, where training mode, or `torch.backends.mha.set_fastpath_enabled(False)`, runs ordinary
aten ops. Each rule here is the sum of those ops' counts under the same counter's rules, for
the same arguments (T = B * S tokens of E features, H heads, N = T * E, FF the feed-forward
width, Sk the keys; every product below is 2 FLOPs and 1 MAC per multiply-add):

    _transformer_encoder_layer_fwd(src a0, E, H, qkv_w a3, qkv_b a4, proj_w a5, proj_b a6,
        use_gelu, norm_first [8], eps, norm1 w/b a10/a11, norm2 w/b a12/a13,
        ffn1 w/b a14/a15, ffn2 w/b a16/a17, mask a18 = None, mask_type = None) -> out
      = in-projection linear(x, qkv_w, qkv_b) (x: src, or norm1(src) with norm_first),
        SDPA over the H heads (nn.TransformerEncoderLayer asks for no attention weights),
        out-projection, residual add, layer norm, linear1, relu|gelu, linear2, residual add,
        layer norm.
    _native_multi_head_attention(q a0, k a1, v a2, E, H, qkv_w a5, qkv_b a6, proj_w a7,
        proj_b a8, mask a9 = None, need_weights [10] = True, average [11] = True,
        mask_type = None) -> (out, weights)
      = in-projection; with need_weights: q * scale, bmm(q, k^T) (baddbmm with a mask),
        softmax, bmm(attn, v), and the mean over heads when averaged; without: SDPA; then the
        out-projection.

The in-projection's input is the transposed batch-first input: for B > 1 and S > 1 it is not
contiguous, and the unfused path copies it (`clone`), multiplies (`mm`) and adds the bias
(`add`); for B = 1 or S = 1 the transposed view is contiguous and one `addmm` does it (the
input is taken as contiguous: strides are not in the rule vocabulary). The q/k/v split copies
the projection to head-major order (`clone`) unless T = 1; MultiheadAttention's weighted path
copies the heads' output back (`clone`) unless Sq = 1. Those forms decide the AC of the bias
add (an addmm's bias is no AC) and the bytes.

Values: the trace holds the fused op's operands, not its intermediates (q, k, v, attention
weights, the norms' and FFN's outputs). The rules take those as not binary, which they are
but by coincidence (a float weight's products of a spike pattern are not all 0 or 1), with
the exceptions the rules name: an attention over one key (Sk = 1) has weights all 1, binary;
and an input with no spike at all, or only spikes, makes the intermediates constant (zeros,
a bias, a norm's offset), so the value-dependent counts (mac, ac, synop) are left unknown
(NULL, reported), as they are for a binary weight matrix (its products can be 0/1) and for
operands without values (meta). Memory is exact for an unmasked call; a mask is read at the
shape the fused op receives (merge_masks expands an attn_mask to (B, H, Sq, Sk)), where the
unfused path reads a smaller view (docs/deviations.md, "Torch's fused transformer ops").
MultiheadAttention's rule assumes self-attention (q is k is v, the only form its fast path
runs): its bytes are unknown when k or v differs from q in size.
"""

from __future__ import annotations

from typing import NamedTuple

from spiketrace.analyze.counters.sql import arg, values_known
from spiketrace.analyze.counters.undecomposed import SDPA, SDPA_KERNELS

ENCODER_LAYER = "aten._transformer_encoder_layer_fwd.default"
MULTI_HEAD_ATTENTION = "aten._native_multi_head_attention.default"
FUSED_LAYERS = (ENCODER_LAYER, MULTI_HEAD_ATTENTION)

# -- SDPA: q @ k^T and attn @ v, as two bmm (beyond SpikingJelly, which has no rule) ---------
# Over q's leading dims (batch, heads, queries): rows = numel(q) / d, each against Sk keys
# (grouped-query attention included: a k/v head serves several query heads). A binary q or k
# makes the first product multiplication-free, a binary v the second; the weights are binary
# when Sk = 1 (all 1). ACs are bmm's for operands that are not binary: the second product's
# nnz(weights) * dv when Sk = 1, else 0; a binary q, k or v leaves them unknown (they depend on
# where the scale is applied and on the weights' values, which SDPA does not expose).
SDPA_OPS = (*SDPA, *(f"aten._scaled_dot_product_{name}.default" for name in SDPA_KERNELS))
_ROWS, _SK = "(a0_numel // greatest(a0_shape[-1], 1))", "a1_shape[-2]"


SDPA_MAC = values_known(f"(CASE WHEN a0_is01 OR a1_is01 THEN 0 ELSE {_ROWS} * {_SK} * a0_shape[-1] END"
                  f" + CASE WHEN a2_is01 OR {_SK} = 1 THEN 0 ELSE {_ROWS} * {_SK} * a2_shape[-1] END)", "a0", "a1", "a2")
SDPA_AC = values_known(f"CASE WHEN a0_is01 OR a1_is01 OR a2_is01 THEN NULL WHEN {_SK} = 1 THEN {_ROWS} * a2_shape[-1]"
                 " ELSE 0 END", "a0", "a1", "a2")

# SDPA's backward (q a1, k a2, v a3, grad_out a0): the five products torch.utils.flop_counter
# counts (its FLOP rule, flop.py): q @ k^T recomputed, dP = dO @ v^T, dV = P^T @ dO, dQ = dS @ k,
# dK = dS^T @ q, each rows * Sk * d (dv for the two with v's or dO's width). A binary operand
# makes a product multiplication-free as in forward: q or k the recompute, k dQ, q dK, v dP;
# with Sk = 1 the weights P are all 1 and dS = P * (dP - rowsum(dO * out)) is 0 (out = v), so
# dV is accumulates (rows * dv, as the forward's second product) and dQ, dK are nothing.
SDPA_BACKWARD_OPS = tuple(f"aten._scaled_dot_product_{name}_backward.default" for name in SDPA_KERNELS)
_B_ROWS, _B_SK, _B_D, _B_DV = "(a1_numel // greatest(a1_shape[-1], 1))", "a2_shape[-2]", "a1_shape[-1]", "a3_shape[-1]"


def _product(zero_when: str, width: str) -> str:
    return f"CASE WHEN {zero_when} THEN 0 ELSE {_B_ROWS} * {_B_SK} * {width} END"


SDPA_BACKWARD_MAC = values_known("(" + " + ".join([
    _product("a1_is01 OR a2_is01", _B_D),                 # q @ k^T, recomputed
    _product("a0_is01 OR a3_is01", _B_DV),                # dP = dO @ v^T
    _product(f"a0_is01 OR {_B_SK} = 1", _B_DV),           # dV = P^T @ dO
    _product(f"a2_is01 OR {_B_SK} = 1", _B_D),            # dQ = dS @ k
    _product(f"a1_is01 OR {_B_SK} = 1", _B_D),            # dK = dS^T @ q
]) + ")", "a0", "a1", "a2", "a3")
SDPA_BACKWARD_AC = values_known(f"CASE WHEN a0_is01 OR a1_is01 OR a2_is01 OR a3_is01 THEN NULL"
                                f" WHEN {_B_SK} = 1 THEN {_B_ROWS} * {_B_DV} ELSE 0 END", "a0", "a1", "a2", "a3")


# -- the fused layers ------------------------------------------------------------------------
class Layout(NamedTuple):
    """Where a fused op keeps what the rules read: the inputs of the in-projection, the head
    count's position, the projections' weight and bias slots, the mask's slot."""
    inputs: tuple[str, ...]
    heads: int
    qkv_weight: str
    qkv_bias: str
    proj_weight: str
    proj_bias: str
    mask: str
    mask_type: int
    weights: tuple[str, ...]  # every weight matrix (a binary one leaves mac/ac/synop unknown)


ENCODER = Layout(("a0",), 2, "a3", "a4", "a5", "a6", "a18", 19, ("a3", "a5", "a14", "a16"))
MHA = Layout(("a0", "a1", "a2"), 4, "a5", "a6", "a7", "a8", "a9", 12, ("a5", "a7"))

N = "a0_numel"  # src / q elements, T * E


def _shapes(layout: Layout) -> dict[str, str]:
    e = f"{layout.qkv_weight}_shape[2]"  # qkv_weight is (3E, E)
    t = f"({N} // greatest({e}, 1))"
    return {"E": e, "T": t, "Sk": f"{layout.inputs[-1]}_shape[2]", "H": arg(layout.heads)}


ENC, MH = _shapes(ENCODER), _shapes(MHA)
FF = "a14_shape[1]"  # linear1's weight is (FF, E)
NORM_FIRST = f"coalesce({arg(8, 'BOOLEAN')}, false)"
NEED_WEIGHTS = f"coalesce({arg(10, 'BOOLEAN')}, true)"
AVERAGE = f"coalesce({arg(11, 'BOOLEAN')}, true)"
# the unfused in-projection is one addmm when the transposed input is contiguous (docstring)
ADDMM_FORM = "(a0_shape[1] = 1 OR a0_shape[2] = 1)"


def _sum(*terms: str) -> str:
    return "(" + " + ".join(terms) + ")"


def _attention_weights(shapes: dict[str, str]) -> str:
    return f"({shapes['H']} * {shapes['T']} * {shapes['Sk']})"  # B * H * Sq * Sk


# FLOPs. A linear with bias: 2 * rows * in * out + rows * out; an add N; layer norm 5n + 4G
# + n (weight) + n (bias) with G = T rows; an activation 1 per element; SDPA 2 * rows * Sk *
# (d + dv) = 4 * N * Sk over the heads; softmax 4 per weight; the mean over heads 1 per weight.
_E, _T, _S = ENC["E"], ENC["T"], ENC["Sk"]
ENCODER_FLOP = _sum(
    f"3 * {N} * (2 * {_E} + 1)",                       # in-projection (mm + bias add, or addmm)
    f"4 * {N} * {_S}",                                  # SDPA
    f"{N} * (2 * {_E} + 1)",                            # out-projection
    f"2 * {N}",                                         # residual adds
    f"2 * (7 * {N} + 4 * {_T})",                        # two layer norms with weight and bias
    f"{_T} * {FF} * (2 * {_E} + 1) + {_T} * {FF}",      # linear1, relu|gelu
    f"{N} * (2 * {FF} + 1)",                            # linear2
)
_ME, _MSk, _A = MH["E"], MH["Sk"], _attention_weights(MH)
MHA_FLOP = _sum(
    f"(a0_numel + a1_numel + a2_numel) * (2 * {_ME} + 1)",  # q, k, v projections with bias
    f"CASE WHEN {NEED_WEIGHTS} THEN {N} + 4 * {N} * {_MSk} + 4 * {_A}"  # scale, 2 bmm, softmax
    f" + CASE WHEN a9_present THEN {_A} ELSE 0 END"        # baddbmm's mask add
    f" + CASE WHEN {AVERAGE} THEN {_A} ELSE 0 END"         # mean over heads
    f" ELSE 4 * {N} * {_MSk} END",                         # SDPA
    f"{N} * (2 * {_ME} + 1)",                              # out-projection
)


def _values_unknown(layout: Layout) -> str:
    """Where the intermediates' binariness cannot be taken for granted (module docstring)."""
    inputs = [f"{x}_is01 IS NULL OR ({x}_is01 AND ({x}_nnz = 0 OR {x}_nnz = {x}_numel))" for x in layout.inputs]
    weights = [f"coalesce({w}_is01, true)" for w in layout.weights]
    return " OR ".join(f"({c})" for c in inputs + weights)


def _guarded(layout: Layout, rule: str) -> str:
    return f"CASE WHEN {_values_unknown(layout)} THEN NULL ELSE {rule} END"


def _one_key(shapes: dict[str, str], value: str) -> str:
    return f"CASE WHEN {shapes['Sk']} = 1 THEN {value} ELSE 0 END"


# MACs: each product rows * in * out, 0 where the in-projection's input is binary; the
# attention's q @ k^T N * Sk and weights @ v N * Sk (0 for Sk = 1: the weights are binary);
# a layer norm's weight one per element.
_ENC_X_BINARY = f"(a0_is01 AND NOT {NORM_FIRST})"  # with norm_first the projection reads norm1(src)
ENCODER_MAC = _guarded(ENCODER, _sum(
    f"CASE WHEN {_ENC_X_BINARY} THEN 0 ELSE 3 * {N} * {_E} END",
    f"{N} * {_S} + CASE WHEN {_S} = 1 THEN 0 ELSE {N} * {_S} END",
    f"{N} * {_E}", f"2 * {N}", f"2 * {N} * {FF}",
))
MHA_MAC = _guarded(MHA, _sum(
    *(f"CASE WHEN {x}_is01 THEN 0 ELSE {x}_numel * {_ME} END" for x in MHA.inputs),
    f"{N} * {_MSk} + CASE WHEN {_MSk} = 1 THEN 0 ELSE {N} * {_MSk} END",
    f"{N} * {_ME}",
))

# Synaptic ACs (synop): a binary projection input's nnz * the outputs it feeds (3E packed,
# E for each of q, k, v), and the weights @ v product's nnz(weights) * dv = N for Sk = 1.
# ACs add the bias add of the mm form (3N; none in the addmm form), the residual adds (N
# each), the layer norms (3n each) and the mean over heads (A - A / H).
_ENCODER_SYNAPTIC = _sum(f"CASE WHEN {_ENC_X_BINARY} THEN a0_nnz * 3 * {_E} ELSE 0 END", _one_key(ENC, N))
_MHA_SYNAPTIC = _sum(*(f"CASE WHEN {x}_is01 THEN {x}_nnz * {_ME} ELSE 0 END" for x in MHA.inputs), _one_key(MH, N))
ENCODER_SYNOP = _guarded(ENCODER, _ENCODER_SYNAPTIC)
MHA_SYNOP = _guarded(MHA, _MHA_SYNAPTIC)
ENCODER_AC = _guarded(ENCODER, _sum(_ENCODER_SYNAPTIC, f"CASE WHEN {ADDMM_FORM} THEN 0 ELSE 3 * {N} END",
                                    f"2 * {N}", f"6 * {N}"))
MHA_AC = _guarded(MHA, _sum(
    _MHA_SYNAPTIC, f"CASE WHEN {ADDMM_FORM} THEN 0 ELSE a0_numel + a1_numel + a2_numel END",
    f"CASE WHEN {NEED_WEIGHTS} AND {AVERAGE} THEN {_A} - {_A} // greatest({MH['H']}, 1) ELSE 0 END",
))


# Bytes: each unfused op's operands read and results written once (memory_access's rules),
# intermediates in the input's element size; the parameters (slots) at their own sizes.
_SIZE = f"(a0_bytes // greatest({N}, 1))"


def _bytes(*slots: str, elements: str) -> str:
    return _sum(*(f"coalesce({slot}_bytes, 0)" for slot in slots), f"({elements}) * {_SIZE}")


def _in_projection(layout: Layout, t: str) -> str:
    # mm form: clone (2N) + mm (N + 3N) + add (3N + 3N); addmm form: N + 3N; the q/k/v split's
    # copy 6N unless T = 1
    return _bytes(layout.qkv_weight, layout.qkv_bias,
                  elements=f"4 * {N} + CASE WHEN {ADDMM_FORM} THEN 0 ELSE 8 * {N} END"
                           f" + CASE WHEN {t} > 1 THEN 6 * {N} ELSE 0 END")


def _mask(layout: Layout, shapes: dict[str, str]) -> str:
    """The mask's bytes as the unfused path moves them: a key padding mask (mask_type 1, (B, Sk))
    expanded over the heads, copied to (B * H, 1, Sk) and read by the attention: 3H times its
    bytes; any other mask as the fused op receives it (docs/deviations.md)."""
    read = f"coalesce({layout.mask}_bytes, 0)"
    return f"CASE WHEN {arg(layout.mask_type)} = 1 THEN 3 * {shapes['H']} * {read} ELSE {read} END"


_STAT_SIZE = "CASE WHEN a0_bytes = 8 * a0_numel THEN 8 ELSE 4 END"  # layer norm's mean and rstd


def _layer_norm(weight: str, bias: str) -> str:
    return f"({_bytes(weight, bias, elements=f'2 * {N}')} + 2 * {_T} * {_STAT_SIZE})"


ENCODER_BYTES = _sum(
    _in_projection(ENCODER, _T),
    _bytes(elements=f"4 * {N}"), _mask(ENCODER, ENC),                   # SDPA: q, k, v, out, mask
    _bytes(ENCODER.proj_weight, ENCODER.proj_bias, elements=f"2 * {N}"),
    _bytes(elements=f"6 * {N}"),                                        # two residual adds
    _layer_norm("a10", "a11"), _layer_norm("a12", "a13"),
    _bytes("a14", "a15", elements=f"{N} + {_T} * {FF}"),               # linear1
    _bytes(elements=f"2 * {_T} * {FF}"),                                # relu|gelu
    _bytes("a16", "a17", elements=f"{_T} * {FF} + {N}"),               # linear2
)
_MHA_WEIGHTED = (  # scale 2N, q @ k^T 2N + A, softmax 2A, weights @ v A + 2N, head copy 2N, mean A + A/H
    f"6 * {N} + 4 * {_A} + CASE WHEN a0_shape[2] > 1 THEN 2 * {N} ELSE 0 END"
    f" + CASE WHEN {AVERAGE} THEN {_A} + {_A} // greatest({MH['H']}, 1) ELSE 0 END"
)
MHA_BYTES = (
    "CASE WHEN a1_numel <> a0_numel OR a2_numel <> a0_numel THEN NULL ELSE " + _sum(
        _in_projection(MHA, MH["T"]),
        f"CASE WHEN {NEED_WEIGHTS} THEN {_bytes(elements=_MHA_WEIGHTED)} ELSE {_bytes(elements=f'4 * {N}')} END",
        _mask(MHA, MH),
        _bytes(MHA.proj_weight, MHA.proj_bias, elements=f"2 * {N}"),
    ) + " END"
)


def _sized(encoder: str, attention: str) -> dict[str, str]:
    """The two fused ops' rules, NULL for an input without a sequence length (a nested tensor's
    ragged one): attention costs per sequence, sum(S_i^2), which numel does not give."""
    return {op: f"CASE WHEN a0_shape[2] IS NULL THEN NULL ELSE {rule} END"
            for op, rule in ((ENCODER_LAYER, encoder), (MULTI_HEAD_ATTENTION, attention))}


FLOP = _sized(ENCODER_FLOP, MHA_FLOP)
MAC = {**_sized(ENCODER_MAC, MHA_MAC), **{op: SDPA_MAC for op in SDPA_OPS},
       **{op: SDPA_BACKWARD_MAC for op in SDPA_BACKWARD_OPS}}
AC = {**_sized(ENCODER_AC, MHA_AC), **{op: SDPA_AC for op in SDPA_OPS},
      **{op: SDPA_BACKWARD_AC for op in SDPA_BACKWARD_OPS}}
SYNOP = {**_sized(ENCODER_SYNOP, MHA_SYNOP), **{op: SDPA_AC for op in SDPA_OPS},
         **{op: SDPA_BACKWARD_AC for op in SDPA_BACKWARD_OPS}}
BYTES = _sized(ENCODER_BYTES, MHA_BYTES)
