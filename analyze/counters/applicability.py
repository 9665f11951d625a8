"""Which ops each counter applies to, so that coverage means something.

An op a counter has no rule for is one of two things:
* **not applicable**: the quantity is 0 by definition (a view moves no data and costs no
  FLOP; a ReLU does no multiply-accumulate; a profiler marker touches no tensor). These are
  not gaps and never fail `--strict`.
* **unknown**: the op does work of the counter's kind and nobody wrote its rule (Adam's
  `addcdiv_` had no FLOP rule; `aten.linear` under inference_mode has no MAC rule). These
  are reported, weigh on coverage, and fail `--strict`.

A counter either lists the ops it applies to (`APPLIES_TO`: every other op is not
applicable; the synaptic counters) or the ops it does not (`NOT_APPLICABLE`: every other op
is applicable; FLOPs and memory traffic). Patterns are fnmatch globs over op names.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

# No tensor work at all: profiler markers, scalar reads to the host, wrappers of a value.
NO_TENSOR_WORK = (
    "profiler.*", "aten._local_scalar_dense.*", "aten.lift_fresh.*", "aten.lift_fresh_copy.*",
    "aten._assert_*", "aten.sym_*", "aten.is_nonzero.*", "aten.item.*", "aten.set_.*", "aten.resize_.*",
    # a nested tensor's metadata queries (a jagged one's layout and sizes reach the mode as ops)
    "prim.layout.*", "prim.device.*", "prim.dtype.*", "aten._nested_tensor_size.*", "aten._nested_tensor_strides.*",
    "aten._nested_tensor_storage_offsets.*",
)
# Data movement, creation and metadata: no arithmetic, so no FLOP (their bytes do count).
NO_ARITHMETIC = NO_TENSOR_WORK + (
    "aten.view.*", "aten._unsafe_view.*", "aten.view_as.*", "aten.reshape.*", "aten._reshape_alias.*",
    "aten.t.*", "aten.t_.*", "aten.transpose.*", "aten.transpose_.*", "aten.permute.*", "aten.expand.*",
    "aten.expand_as.*", "aten.squeeze.*", "aten.squeeze_.*", "aten.unsqueeze.*", "aten.unsqueeze_.*",
    "aten.select.*", "aten.select_backward.*", "aten.slice.*", "aten.slice_backward.*", "aten.unbind.*",
    "aten.split.*", "aten.split_with_sizes.*", "aten.chunk.*", "aten.narrow.*", "aten.as_strided.*",
    "aten.alias.*", "aten.detach.*", "aten.detach_.*", "aten.clone.*", "aten.copy_.*", "aten._to_copy.*",
    "aten.contiguous.*", "aten.stack.*", "aten.cat.*", "aten.flatten.*", "aten.unflatten.*",
    "aten.empty.*", "aten.empty_like.*", "aten.empty_strided.*", "aten.new_empty*", "aten.new_zeros.*",
    "aten.new_ones.*", "aten.new_full.*", "aten.zeros.*", "aten.zeros_like.*", "aten.ones.*",
    "aten.ones_like.*", "aten.full.*", "aten.full_like.*", "aten.fill_.*", "aten.zero_.*", "aten.scalar_tensor.*",
    "aten.arange.*", "aten.index_select.*", "aten.gather.*", "aten.index.*", "aten.masked_select.*",
    "aten.repeat.*", "aten.roll.*", "aten.flip.*", "aten._unsafe_index.*", "aten._foreach_copy_.*",
    "aten._foreach_zero_.*",
    # nested tensors built from parts, viewed over their values, padded into a plain tensor
    "aten._nested_tensor_from_tensor_list.*", "aten._nested_view_from_*", "aten._nested_get_*",
    "aten.to_padded_tensor.*", "aten._nested_from_padded*",
    # padding copies values (a conv's padding='same' with an even kernel, padding_mode='reflect')
    "aten.constant_pad_nd.*", "aten.reflection_pad*", "aten.replication_pad*", "aten._pad_circular.*",
    # random numbers are drawn, not computed from operands
    "aten.rand.*", "aten.rand_like.*", "aten.randn.*", "aten.randn_like.*", "aten.randint*", "aten.normal_.*",
    "aten.uniform_.*", "aten.bernoulli*", "aten.randperm.*",
)
# Multiply-accumulate work: products of two tensors summed (the synaptic ops, decomposed or not).
SYNAPTIC = (
    "aten.mm.*", "aten.addmm.*", "aten.bmm.*", "aten.baddbmm.*", "aten.addbmm.*", "aten.mv.*", "aten.addmv.*",
    "aten.dot.*", "aten.matmul.*", "aten.linear.*", "aten.einsum.*", "aten.convolution.*", "aten._convolution.*",
    "aten.conv1d.*", "aten.conv2d.*", "aten.conv3d.*", "aten.conv_transpose*", "aten.convolution_backward.*",
    "aten._scaled_dot_product_*", "aten.scaled_dot_product_attention.*",
    # torch's fused transformer fast path: a whole layer's products (fused_attention.py)
    "aten._transformer_encoder_layer_fwd.*", "aten._native_multi_head_attention.*",
)
NORMALISATION = ("aten.native_batch_norm*", "aten.batch_norm.*", "aten._native_batch_norm*",
                 "aten.native_layer_norm*", "aten.layer_norm.*", "aten.native_group_norm*", "aten.group_norm.*",
                 # the GPU's and exported programs' batch norms (analyze/counters/device_ops.py)
                 "aten.cudnn_batch_norm*", "aten.miopen_batch_norm*", "aten._batch_norm_with_update*",
                 "aten._batch_norm_no_update*", "aten.batch_norm_backward.*")
# Accumulations: sums of tensors or of a tensor's elements.
ACCUMULATION = (
    "aten.add.*", "aten.add_.*", "aten.sub.*", "aten.sub_.*", "aten.rsub.*", "aten.sum.*", "aten.mean.*",
    "aten.cumsum*", "aten.avg_pool*", "aten.adaptive_avg_pool*", "aten.addcmul*", "aten.addcdiv*", "aten.lerp*",
    # their multi-tensor forms and the fused optimizers, which a GPU run dispatches instead
    "aten._foreach_add*", "aten._foreach_sub*", "aten._foreach_lerp*", "aten._fused_adam*", "aten._fused_sgd*",
    "aten._fused_adagrad*",
    # SpikingJelly's fused neuron ops (CUDA): the charge accumulates. sj_if, sj_lif, sj_plif,
    # sj_qif, sj_eif, sj_izhikevich have rules (sj_neurons/); the others
    # (sj_ilif, sj_activation_aware_if, sj_stbif, ...) are reported as unknown, never silently
    # not applicable
    "sj_*.forward.*", "sj_*.backward.*",
)

APPLICABILITY: dict[str, dict[str, tuple[str, ...]]] = {
    "flop": {"not_applicable": NO_ARITHMETIC},
    "memory_access": {"not_applicable": NO_TENSOR_WORK},
    "mac": {"applies_to": SYNAPTIC + NORMALISATION},
    "synop": {"applies_to": SYNAPTIC},
    "ac": {"applies_to": SYNAPTIC + NORMALISATION + ACCUMULATION},
}


def applies(counter: str, op: str) -> bool:
    """Whether `counter` measures anything for `op` (a counter not listed applies to every op)."""
    table = APPLICABILITY.get(counter, {})
    if "applies_to" in table:
        return any(fnmatchcase(op, pattern) for pattern in table["applies_to"])
    return not any(fnmatchcase(op, pattern) for pattern in table.get("not_applicable", ()))
