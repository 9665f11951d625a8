"""How much of the value statistics (tensors.nnz / tensors.is01) a capture takes: the levels.

The level is a capture setting, written in every rank's manifest (settings.value_statistics),
and each analysis states the level it needs (analyze/trace/statistics_level.py), so an
analysis never reads a null statistic as "not a spike" on a trace taken at a lower level.

* ``full``: every described tensor state (what every shipped analysis can use).
* ``synaptic``: only where a shipped rule of a counter, energy model or spike-rate view reads
  them: the operands of the ops in SYNAPTIC_LEVEL_OPERANDS (synaptic ops, the element-wise
  adds the AC counter costs by spikes, the backward and fused products whose rules read
  values) and the inputs and outputs module forward hooks see (layer inputs and spiking
  outputs). Other backward gradients, optimizer state, neuron memories and the intermediates
  inside a module get none. NeuroMC (which maps any op with a spiking
  operand) and the neuron_state counter (which tests every operand of a neuron's ops) need
  ``full``.
* ``none``: no tensor statistics (shapes, ops and module structure), and of the per-op
  scalars only the NeuroBench convention's (condition ``forward``), which serve it at any level.

Old manifests hold a bool: True is ``full``, False is ``none``.
"""

from __future__ import annotations

from spiketrace.schemas.statistics import SYNAPTIC_INPUTS

LEVELS = ("none", "synaptic", "full")

_COSTED_BY_SPIKES = [
    *(f"aten.{name}.{overload}" for name in ("add", "add_", "sub", "sub_") for overload in ("Tensor", "Scalar")),
    "aten.rsub.Tensor", "aten.rsub.Scalar",
]

# Products whose MAC/AC rules read their operands' values beyond the synaptic ops: a conv's
# backward (grad_out, x, w), attention (q, k, v; the backward's grad_out first), torch's fused
# transformer layers (their inputs and weights), SpikingJelly's fused neurons (x, v_init).
_SDPA = ("flash_attention_for_cpu", "flash_attention", "efficient_attention", "cudnn_attention")
_PRODUCTS_BY_VALUES: dict[str, tuple[int, ...]] = {
    "aten.convolution_backward.default": (0, 1, 2),
    "aten.scaled_dot_product_attention.default": (0, 1, 2),
    "aten._scaled_dot_product_attention_math.default": (0, 1, 2),
    **{f"aten._scaled_dot_product_{name}.default": (0, 1, 2) for name in _SDPA},
    **{f"aten._scaled_dot_product_{name}_backward.default": (0, 1, 2, 3) for name in _SDPA},
    "aten._native_multi_head_attention.default": (0, 1, 2, 5, 7),
    "aten._transformer_encoder_layer_fwd.default": (0, 3, 5, 14, 16),
    **{f"sj_{name}.forward.default": (0, 1) for name in ("if", "lif", "plif", "qif", "eif")},
    "sj_izhikevich.forward.default": (0, 2),  # x, w_init (its spikes, an output, are not taken)
    **{f"sj_{name}.backward.default": (0,) for name in ("if", "lif", "plif", "qif", "eif", "izhikevich")},
}

# op -> positional operands whose statistics are taken at the `synaptic` level
# (tests/test_statistics_levels.py checks it covers every operand a shipped rule reads).
SYNAPTIC_LEVEL_OPERANDS: dict[str, tuple[int, ...]] = {
    **{op: (0, 1) for op in _COSTED_BY_SPIKES},
    **SYNAPTIC_INPUTS,
    **_PRODUCTS_BY_VALUES,
}

# Module hook kinds whose tensors get statistics at the `synaptic` level.
SYNAPTIC_LEVEL_HOOKS = frozenset({"forward_pre", "forward_post"})


def level_of(setting) -> str:
    """The level a manifest's or a caller's `value_statistics` setting names."""
    if setting is True:
        return "full"
    if setting is False or setting is None:
        return "none"
    if setting in LEVELS:
        return setting
    raise ValueError(f"value_statistics must be one of {LEVELS} (or True/False), got {setting!r}")


def covers(level: str, needed: str) -> bool:
    """A trace taken at `level` serves an analysis that needs `needed`."""
    return LEVELS.index(level) >= LEVELS.index(needed)
