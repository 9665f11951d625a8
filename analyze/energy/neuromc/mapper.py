"""NeuroMC's mapping: a trace -> its preset-independent Activity (see the package docstring).

The pieces of a large trace (more than `shard_events` events, by default SHARD_EVENTS of
analyze/trace/step_ranges.py) are mapped one at a time (parts.py), each shown in the trace's
views in turn, and their facts added up before they are worded: the refusals, warnings and
uncosted rows come out as one pass over the whole trace gives them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from spiketrace.analyze.counters import RECOMPUTE_CHOICES
from spiketrace.analyze.counters.filters import where_sql
from spiketrace.analyze.energy import stateful
from spiketrace.analyze.energy.neuromc import kinds as fragment_kinds
from spiketrace.analyze.energy.neuromc.activity import extra_counts, memory_terms, weight_residency
from spiketrace.analyze.energy.neuromc.modules import leftover_classes
from spiketrace.analyze.energy.neuromc.optimizer import optimizer_refusals
from spiketrace.analyze.energy.neuromc.parts import SLOTS, added_uncosted, map_part
from spiketrace.analyze.energy.neuromc.report import UNCOSTED_COLUMNS
from spiketrace.analyze.energy.neuromc.sql import install
from spiketrace.analyze.energy.scopes import recompute_default
from spiketrace.analyze.trace import step_ranges

MODEL = "neuromc"
COMPAT_MODES = (None, "spikingjelly")


@dataclass
class Activity:
    """What the run did, in NeuroMC terms, independent of any preset.

    kinds: one row per kind of fragment part (kinds.KIND_COLUMNS: everything but its place in
      the run), with the primitive counts mux/add/mul/comp/sqrt and reuse_stage/weight_bits/
      weight_instance for the costing's weight-reuse decision.
    fragments: one row per fragment part, in SpikingJelly's order: kind (a row of kinds), rank,
      step, fragment_id, trace_fragment; optimizer fragments have one part per module.
    memory: bits one part of a kind moves per (kind, component, level, direction, instance);
      weight_load terms are the ones a weight-reusing stage skips when its weights fit.
    uncosted: work no rule maps (UNCOSTED_COLUMNS), ranked by volume.
    refusals: SpikingJelly's refusal messages for this run, in its order (strict raises the first).
    """

    kinds: pd.DataFrame
    fragments: pd.DataFrame
    memory: pd.DataFrame
    uncosted: pd.DataFrame
    refusals: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    compat: str | None = None

    def parts_per_kind(self):
        """How many fragment parts are of each kind (the weight of a kind's costs)."""
        return fragment_kinds.weighted(self.kinds, self.fragments)

    def fragment_rows(self) -> pd.DataFrame:
        """One row per fragment part with every column (FRAGMENT_COLUMNS, fragment_id, order)."""
        return fragment_kinds.expanded(self.kinds, self.fragments)


def _ignore_names(ignore_modules) -> list[str]:
    return [m if isinstance(m, str) else f"{m.__module__}.{m.__qualname__}" for m in ignore_modules or ()]


def _refusal_for_ops(ops: pd.DataFrame) -> str | None:
    if not len(ops):
        return None
    listed = sorted(f"{name} (calls={int(n)})" for name, n in zip(ops["name"], ops["calls"]))
    return "NeuroMC runtime does not support these aten ops: " + ", ".join(listed[:30])


def _uncosted(parts, spikingjelly: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(every uncosted row in the activity's order, the op rows alone) over every part.
    Compat: convolution_backward events are uncosted only when the trace holds more of them
    than backward calls of conv modules (SpikingJelly's test, over the whole trace)."""
    events, calls = (sum(p.conv_backward[i] for p in parts) for i in (0, 1))
    extra = [p.conv_backward_ops for p in parts if p.conv_backward_ops is not None] if events > calls else []
    slots = {slot: added_uncosted(parts, slot, extra if slot == "ops" else ()) for slot in SLOTS}
    frames = [frame for frame in slots.values() if len(frame)]
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(UNCOSTED_COLUMNS))
    for column in UNCOSTED_COLUMNS:
        if column not in frame:
            frame[column] = None
    return frame[list(UNCOSTED_COLUMNS)], slots["ops"]


def _messages(parts, ops: pd.DataFrame, spikingjelly: bool) -> tuple[list[str], list[str]]:
    """(refusals, warnings) of every part's facts, in the order one pass over the trace says them."""
    refusals, warnings = [], []
    if any(p.values_missing for p in parts):
        warnings.append("the trace lacks value statistics (is01) for some tensors: they count as non-spiking")
    if any(p.conv3d for p in parts):
        refusals.append("NeuroMC runtime does not support nn.Conv3d yet.")
    if any(p.bad_layout for p in parts):
        refusals.append("Expected multi-step tensor with shape [T, N, C, ...] (a multi-step module saw fewer dims).")
    if any(p.unpaired for p in parts):
        refusals.append("pop from empty list (a module backward has no recorded forward input)")
        warnings.append("some module backward calls have no recorded forward input; their input counts as non-spiking")
    warnings += list(dict.fromkeys(w for p in parts for w in p.potential_warnings))
    leftovers = leftover_classes(pd.concat([p.leftovers for p in parts if p.leftovers is not None], ignore_index=True))
    if leftovers:
        names = ", ".join(leftovers)
        refusals.append(f"NeuroMC runtime cannot match selective backward calls for repeated modules: {names}")
        warnings.append(f"forward inputs of {names} were never matched by a backward (LIFO pairing kept)")
    refusals += optimizer_refusals(set().union(*(p.optimizer_problems for p in parts)),
                                   next((p.other_optimizer for p in parts if p.other_optimizer), None))
    first_error = next((p.first_error for p in parts if p.first_error), None)
    if first_error:
        refusals.append(first_error)
    message = _refusal_for_ops(ops)
    if message:
        refusals.append(message)
    return refusals, warnings


def _fragments(parts, spikingjelly: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(kinds, fragments) of every part, as one pass over the trace orders them; compat drops
    the trace fragments any module fragment of the trace repeats."""
    kinds, fragments = fragment_kinds.combine([(p.kinds, p.places) for p in parts])
    signatures = [p.module_signatures for p in parts if p.module_signatures is not None]
    if spikingjelly and signatures:
        kinds, fragments = fragment_kinds.drop_trace_duplicates(kinds, fragments, pd.concat(signatures))
    for added in (extra_counts(kinds), weight_residency(kinds)):
        for column in added.columns:
            kinds[column] = added[column].to_numpy()
    return kinds, fragments


def activity(trace, *, stage=None, ignore_modules=(), compat=None, strict=False, step=None, rank=None,
             recompute=None, shard_events: int | None = None, **options) -> Activity:
    """Map `trace` to NeuroMC activity. stage/step/rank select fragments (a value or a list);
    recompute: "include" (the default), "exclude" (compat's default) or "only". A trace of
    more than `shard_events` events (None: step_ranges.SHARD_EVENTS, read when it maps) is
    mapped a piece at a time (see the module docstring)."""
    if options:
        raise TypeError(f"the neuromc model takes no options {sorted(options)} "
                        "(it takes stage, step, rank, recompute, shard_events)")
    if compat not in COMPAT_MODES:
        raise ValueError(f"compat must be one of {COMPAT_MODES}, got {compat!r}")
    if recompute not in (None, *RECOMPUTE_CHOICES):
        raise ValueError(f"recompute must be one of {RECOMPUTE_CHOICES}, got {recompute!r}")
    spikingjelly = compat == "spikingjelly"
    selection = (stage, step, rank, recompute or recompute_default(MODEL, compat))
    install(trace.con)
    ignore_names = _ignore_names(ignore_modules)
    limit = step_ranges.SHARD_EVENTS if shard_events is None else shard_events
    with step_ranges.shown_in_ranges(trace, limit) as pieces:
        parts = [map_part(trace, selection, spikingjelly, ignore_names) for _ in pieces]
    kinds, fragments = _fragments(parts, spikingjelly)
    uncosted, ops = _uncosted(parts, spikingjelly)
    refusals, warnings = _messages(parts, ops, spikingjelly)
    del parts
    if not len(fragments):
        refusals.append("No NeuroMC-supported runtime fragments were recognized.")
        warnings.append("no NeuroMC fragment was recognised in the selection")
    ran = where_sql(stage=stage, step=step, rank=rank, recompute=selection[3])  # the calls the fragments are of
    warnings += stateful.warnings(trace, MODEL, compat, ignore_modules, where=ran)
    result = Activity(kinds, fragments, memory_terms(kinds), uncosted, refusals, warnings, compat)
    if strict and refusals:
        raise ValueError(refusals[0])
    return result
