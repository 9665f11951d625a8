"""How much of the value statistics (tensors.nnz / tensors.is01) a capture takes: the levels.

The level is a capture setting, written in every rank's manifest (settings.value_statistics),
and each analysis states the level it needs (analyze/trace/statistics_level.py), so an
analysis never reads a null statistic as "not a spike" on a trace taken at a lower level.

* ``full``: every described tensor state (what every shipped analysis can use).
* ``synaptic``: only where a shipped rule of a counter, energy model or spike-rate view reads
  them: the operands of the ops in SYNAPTIC_LEVEL_OPERANDS (synaptic ops and the element-wise
  adds the AC counter costs by spikes) and the inputs and outputs module forward hooks see
  (layer inputs and spiking outputs). Backward gradients, optimizer state, neuron memories
  and the intermediates inside a module get none. NeuroMC (which maps any op with a spiking
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

# op -> positional operands whose statistics are taken at the `synaptic` level.
SYNAPTIC_LEVEL_OPERANDS: dict[str, tuple[int, ...]] = {
    **{op: (0, 1) for op in _COSTED_BY_SPIKES},
    **SYNAPTIC_INPUTS,
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
