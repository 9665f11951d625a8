"""What each energy model models, which one a trace gets by default, and what to say when a
model is asked about work it does not model.

A number without its scope misleads: `compute` (SpikingJelly's SimpleEnergy) charges memory
traffic only for forward module calls, so on a training step its backward comes out at a
few percent while the counters show more backward FLOPs than forward. So every report
carries its model's scope, and a trace holding phases outside it gets a warning naming them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Scope:
    phases: tuple[str, ...]  # the phases whose work the model costs in full
    label: str  # a few words, shown next to every number the model produces
    limits: str  # what it leaves out, said in the warning


SCOPES = {
    "compute": Scope(("forward",), "forward-only",
                     "its memory energy only sees forward module calls (as SpikingJelly's SimpleEnergy); "
                     "backward and optimizer ops get MAC/AC energy but no memory traffic"),
    "neuromc": Scope(("forward", "backward", "optimizer"), "training: forward, backward, optimizer",
                     "it models forward, backward and optimizer stages"),
    "lemaire": Scope(("forward",), "inference-only",
                     "it models forward inference of Linear/Conv layers and IF/LIF neurons"),
    "spikesim": Scope(("forward",), "inference-only, Conv2d crossbars",
                      "it models forward inference of Conv2d layers on crossbars"),
    "paper": Scope(("forward",), "inference-only, synaptic layers",
                   "it costs the forward synaptic layers (conv, linear, spike matmuls) as papers do: MACs and SOPs, "
                   "no neuron, normalisation or memory energy"),
    "chip": Scope(("forward",), "inference-only, a chip's events",
                  "it costs forward synaptic events, neuron updates and spikes on a chip (analyze/energy/chip.py); "
                  "work a chip cannot do as events is listed, costed only under a host preset"),
}
TRAINING_PHASES = ("backward", "optimizer")
DEFAULT_MODEL = {"training": "neuromc", "inference": "compute"}


def scope_label(model: str, phases=None) -> str:
    """The scope shown beside a model's numbers. A model of several phases (neuromc) says which
    of them the selection holds, so an inference trace reads "inference: forward" and not the
    training the model could cost; `phases` (those the selection holds, as trace_phases gives
    them) None or holding none of the model's: its label."""
    scope = SCOPES[model]
    held = [phase for phase in scope.phases if phase in (phases or ())]
    if len(scope.phases) == 1 or not held:
        return scope.label
    kind = "training" if any(phase in TRAINING_PHASES for phase in held) else "inference"
    return f"{kind}: {', '.join(held)}"


def selection_label(trace, model: str, selection=None) -> str:
    """scope_label of what `trace` holds, within `selection` (a present.selection.Selection, whose
    views show only its rows) when given."""
    if selection is None or not selection:
        return scope_label(model, trace_phases(trace))
    with selection.views(trace):
        return scope_label(model, trace_phases(trace))


def recompute_default(model: str | None, compat: str | None) -> str:
    """What a model does with the work activation checkpointing recomputed during backward when
    not told (recompute=None): it ran, so it is counted and costed ("include"), except by
    NeuroMC under compat="spikingjelly", which leaves it out as SpikingJelly does ("exclude")."""
    return "exclude" if model == "neuromc" and compat == "spikingjelly" else "include"


def trace_phases(trace, stage=None) -> dict[str, int]:
    """phase -> events of the selection (all stages, or `stage`)."""
    where = ""
    if stage is not None:
        stages = stage if isinstance(stage, (list, tuple, set)) else [stage]
        where = "WHERE stage IN (" + ", ".join("'" + str(s).replace("'", "''") + "'" for s in stages) + ")"
    rows = trace.con.execute(f"SELECT phase, count(*) FROM events {where} GROUP BY phase").fetchall()
    return {str(phase): int(n) for phase, n in rows if phase is not None}


def trace_kind(trace) -> str:
    """'training' when the trace holds backward or optimizer work, else 'inference'."""
    return "training" if any(p in TRAINING_PHASES for p in trace_phases(trace)) else "inference"


def default_model(trace) -> str:
    """The model a trace gets when none is named: a training trace a training model."""
    return DEFAULT_MODEL[trace_kind(trace)]


def scope_warnings(trace, model: str, stage=None) -> list[str]:
    """A warning when the selection holds work outside `model`'s scope, naming that work."""
    scope = SCOPES.get(model)
    if scope is None:
        return []
    outside = {p: n for p, n in trace_phases(trace, stage).items() if p not in scope.phases}
    if not outside:
        return []
    work = ", ".join(f"{phase} ({n} ops)" for phase, n in sorted(outside.items()))
    better = DEFAULT_MODEL["training"] if any(p in TRAINING_PHASES for p in outside) else None
    advice = f"; for a training step use the {better} model" if better and better != model else ""
    return [f"the {model} model is {scope.label}: {scope.limits}. This selection also holds {work}, "
            f"which it does not cost in full{advice}"]


# How each model's components nest (child -> parent): a parent's energy is the sum of its
# children's, so shares are taken per level (a child's share of its parent), never of
# parents and children together (which added up to 195%).
COMPONENT_PARENTS = {
    "compute": {"parameter_memory_pj": "memory_pj", "neuron_state_memory_pj": "memory_pj"},
    "neuromc": {"energy_mac_pj": "energy_compute_pj", "energy_extra_compute_pj": "energy_compute_pj",
                "energy_base_memory_pj": "energy_memory_pj", "energy_extra_memory_pj": "energy_memory_pj"},
    "lemaire": {"inout_pj": "memory_pj", "params_pj": "memory_pj", "potential_pj": "memory_pj"},
    "spikesim": {},
    "paper": {},
}
