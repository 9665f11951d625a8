"""NeuroMC energy, offline, equal to SpikingJelly 2.0.0's NeuroMCEnergyProfiler /
estimate_neuromc_runtime_energy (op_counter/neuromc/).

    from analyze import open_trace
    from analyze.energy import neuromc
    with open_trace("runs/step") as trace:
        activity = neuromc.activity(trace)                 # the mapping, once
        report = neuromc.cost(activity, neuromc.Costs())   # any number of presets
        report.energy_total_pj, report.energy_by_stage, report.uncosted

Mapping (preset-independent): module fragments from module hook events
(modules.py), trace fragments from aten ops (fallback.py), optimizer
fragments from optimizer_steps (optimizer.py); then per fragment its primitive
counts and the bits it moves per memory instance (activity.py). Costing
(report.py) prices them under a preset (costs.py).

Stages are the trace's: each stage's phase, reuse_weights and batch_norm_backward are
SpikingJelly's stage() options (a phase inferred from the stage's name counts as given).
SpikingJelly's estimator never runs optimizer.step() but models it from the optimizer state
(record_optimizer_step); a recorded step() is modelled the same way, from optimizer_steps,
and the aten ops inside an optimizer-phase stage are that step's own, so they are neither
mapped nor uncosted.

Recomputation (activation checkpointing: the forward ops and module calls the trace flags
`recompute`) is executed work and is costed by default, as forward fragments of the stage it
ran in; recompute="exclude" leaves it out, as SpikingJelly does (it skips every forward a
backward stage runs with grad enabled), and so does compat="spikingjelly" unless recompute is
given. recompute="only" keeps just it.

Default mode fixes SpikingJelly's double and miscounts (Linear backward GEMMs counted twice,
grouped convs over-counted by groups, a 3-D Linear input's rows, a binary-input BN backward
counted twice) and refuses nothing: what no rule covers is listed, ranked by volume, in
`report.uncosted`. compat="spikingjelly" reproduces SpikingJelly's numbers; strict=True
raises where SpikingJelly refuses (ops without a rule, unsupported optimizers, Conv3d,
ambiguous selective backward, presets lacking memory instances).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from analyze import neurons
from analyze.counters import RECOMPUTE_CHOICES
from analyze.energy.neuromc import rules
from analyze.energy.scopes import recompute_default
from analyze.energy.neuromc.activity import extra_counts, memory_terms, weight_residency
from analyze.energy.neuromc.costs import PRESET_UNITS, Costs, MemoryInstanceSpec
from analyze.energy.neuromc.fallback import (
    drop_duplicates_of_modules,
    trace_fragments,
    uncosted_ops,
)
from analyze.energy.neuromc.modules import module_fragments
from analyze.energy.neuromc.optimizer import optimizer_fragments
from analyze.energy.neuromc.report import UNCOSTED_COLUMNS, Report, cost
from analyze.energy.neuromc.sql import install
from analyze.energy.neuromc.sweep import SWEEPABLE, sweep_totals  # recost's bulk path for sweeps

MODEL = "neuromc"
NeuroMCCosts = Costs
NeuroMCReport = Report
COMPAT_MODES = (None, "spikingjelly")

__all__ = ["MODEL", "PRESET_UNITS", "Activity", "Costs", "MemoryInstanceSpec", "NeuroMCCosts", "NeuroMCReport",
           "Report", "SWEEPABLE", "activity", "cost", "sweep_totals"]


@dataclass
class Activity:
    """What the run did, in NeuroMC terms, independent of any preset.

    fragments: one row per fragment part (FRAGMENT_COLUMNS, fragment_id, order, the
      primitive counts mux/add/mul/comp/sqrt, and reuse_stage/weight_bits/weight_instance
      for the costing's weight-reuse decision); optimizer fragments have one part per module.
    memory: bits per (fragment row, component, level, direction, instance); weight_load
      terms are the ones a weight-reusing stage skips when its weights fit.
    uncosted: work no rule maps (UNCOSTED_COLUMNS), ranked by volume.
    refusals: SpikingJelly's refusal messages for this run, in its order (strict raises the first).
    """

    fragments: pd.DataFrame
    memory: pd.DataFrame
    uncosted: pd.DataFrame
    refusals: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    compat: str | None = None


def _ignore_names(ignore_modules) -> list[str]:
    return [m if isinstance(m, str) else f"{m.__module__}.{m.__qualname__}" for m in ignore_modules or ()]


def _selected(frame: pd.DataFrame, stage, step, rank, recompute=None) -> pd.DataFrame:
    for column, value in (("stage", stage), ("step", step), ("rank", rank)):
        if value is not None and len(frame):
            values = value if isinstance(value, (list, tuple, set)) else [value]
            frame = frame[frame[column].isin(list(values))]
    if recompute in ("exclude", "only") and len(frame):  # rows without the flag (optimizer) are not recomputed
        flag = frame["recompute"].fillna(False).astype(bool) if "recompute" in frame else pd.Series(False, frame.index)
        frame = frame[flag if recompute == "only" else ~flag]
    return frame


def _joined(values) -> str:
    return ", ".join(sorted({str(v) for v in values if isinstance(v, str) and v}))


def _op_rows(ops: pd.DataFrame) -> pd.DataFrame:
    """Uncosted op events -> one row per op with its calls and tensor volumes."""
    if not len(ops):
        return pd.DataFrame(columns=list(UNCOSTED_COLUMNS))
    grouped = ops.groupby("op", as_index=False).agg(
        calls=("seq", "size"), input_elements=("input_elements", "sum"), output_elements=("output_elements", "sum"),
        bytes_read=("bytes_read", "sum"), bytes_written=("bytes_written", "sum"),
        stages=("stage", _joined), modules=("module", _joined), reason=("reason", "first"))
    return grouped.rename(columns={"op": "name"}).assign(kind="op")


def _call_rows(frame: pd.DataFrame, kind: str, name, reason, elements: str) -> pd.DataFrame:
    """Uncosted module calls or optimizer steps -> one row per name."""
    if not len(frame):
        return pd.DataFrame(columns=list(UNCOSTED_COLUMNS))
    return frame.assign(name=name, reason=reason).groupby(["name", "reason"], as_index=False).agg(
        calls=("seq", "nunique"), input_elements=(elements, "sum"), stages=("stage", _joined),
        modules=("module", _joined)).assign(kind=kind)


def _refusal_for_ops(ops: pd.DataFrame) -> str | None:
    if not len(ops):
        return None
    listed = sorted(f"{op} (calls={n})" for op, n in ops.groupby("op").size().items())
    return "NeuroMC runtime does not support these aten ops: " + ", ".join(listed[:30])


def _module_part(trace, selection, spikingjelly, ignore_names, refusals, warnings, uncosted) -> pd.DataFrame:
    modules, leftovers = module_fragments(trace, compat=spikingjelly, ignore_names=ignore_names,
                                          recompute=selection[3] != "exclude")
    refused = pd.Series(False, index=modules.index)
    if spikingjelly and (modules["module_kind"] == "conv3d").any():
        refusals.append("NeuroMC runtime does not support nn.Conv3d yet.")
        conv3d = modules["module_kind"] == "conv3d"
        uncosted.append(_call_rows(_selected(modules[conv3d], *selection), "module", "torch.nn.Conv3d",
                                   "SpikingJelly refuses models with Conv3d", "mac_count"))
        refused |= conv3d
    bad = modules["bad_layout"].fillna(False).astype(bool)
    if bad.any():
        refusals.append("Expected multi-step tensor with shape [T, N, C, ...] (a multi-step module saw fewer dims).")
        uncosted.append(_call_rows(_selected(modules[bad], *selection), "module", modules.loc[bad, "op_name"],
                                   "a multi-step module's tensor has fewer than 3 dims", "input_numel"))
        refused |= bad
    if modules["unpaired"].fillna(False).astype(bool).any():
        refusals.append("pop from empty list (a module backward has no recorded forward input)")
        warnings.append("some module backward calls have no recorded forward input; their input counts as non-spiking")
    somas = set(modules.loc[modules["module_kind"] == "soma", "module"])
    reference = "spikingjelly" if spikingjelly else None
    for path, name, potentials in neurons.several_potentials(trace, "neuromc", reference):
        if path in somas:
            warnings.append(f"{path} ({name}) integrates {len(potentials)} state variables per step "
                            f"({', '.join(potentials)}); NeuroMC's soma holds one membrane potential: it is costed "
                            "as one soma per output element and step, the other state "
                            f"({', '.join(potentials[:-1])}) is not costed")
    if len(leftovers):
        names = ", ".join(sorted(set(leftovers["class_name"])))
        refusals.append(f"NeuroMC runtime cannot match selective backward calls for repeated modules: {names}")
        warnings.append(f"forward inputs of {names} were never matched by a backward (LIFO pairing kept)")
    return modules[~refused]


def _optimizer_part(trace, selection, spikingjelly, refusals, uncosted) -> pd.DataFrame:
    optimizer, refused, messages = optimizer_fragments(trace, compat=spikingjelly)
    refusals += messages
    if len(refused):
        refused = _selected(refused, *selection)
        uncosted.append(_call_rows(refused, "optimizer", refused["name"], refused["reason"], "numel"))
    return optimizer


def _trace_part(trace, selection, spikingjelly, modules, refusals, uncosted) -> pd.DataFrame:
    traced, events = trace_fragments(trace, compat=spikingjelly, recompute=selection[3] != "exclude")
    failed = events[events["error"].notna()]
    if len(failed):
        refusals.append(failed["error"].iloc[0])
        uncosted.append(_op_rows(_selected(failed, *selection).assign(
            reason=failed["error"], input_elements=failed["x_numel"], output_elements=failed["out_numel"],
            bytes_read=None, bytes_written=None)))
    if spikingjelly:
        traced = drop_duplicates_of_modules(traced, modules)
    ops = _selected(uncosted_ops(trace, events, compat=spikingjelly), *selection)
    message = _refusal_for_ops(ops)
    if message:
        refusals.append(message)
    uncosted.append(_op_rows(ops))
    return traced


def _assemble(parts: list[pd.DataFrame], traced: pd.DataFrame, selection) -> pd.DataFrame:
    """One frame of fragment parts in SpikingJelly's order (hook fragments, then trace ones).
    Each part contributes just the fragment columns, and columns are added in place: on a
    long trace the fragments are the largest thing mapped, so they are not copied more than
    the sort needs."""
    columns = [*rules.FRAGMENT_COLUMNS, "recompute"]
    frames = [p.reindex(columns=columns).assign(order_group=0) for p in parts if len(p)]
    frames.append(traced.reindex(columns=columns).assign(order_group=1))
    fragments = pd.concat(frames, ignore_index=True)
    del frames
    fragments = _selected(fragments, *selection).drop(columns="recompute")
    fragments = fragments.sort_values(["order_group", "rank", "seq", "sub"], kind="stable", ignore_index=True)
    fragments["fragment_id"] = fragments.groupby(["order_group", "rank", "seq", "sub"], sort=False).ngroup()
    fragments["order"] = range(len(fragments))
    del fragments["order_group"]
    for column in ("optimizer_has_momentum", "optimizer_has_weight_decay", "optimizer_has_momentum_buffer"):
        fragments[column] = fragments[column].fillna(False).astype(bool)
    for column in (*rules.LOOP_DIMS, "G", "input_precision_bits", "weight_precision_bits", "output_precision_bits",
                   "input_numel", "weight_numel", "output_numel", "mac_count", "b_type", "t_type"):
        fragments[column] = fragments[column].astype("int64")
    fragments["module"] = fragments["module"].fillna("Global")
    for added in (extra_counts(fragments), weight_residency(fragments)):
        for column in added.columns:
            fragments[column] = added[column].to_numpy()
    return fragments


def activity(trace, *, stage=None, ignore_modules=(), compat=None, strict=False, step=None, rank=None,
             recompute=None, **options) -> Activity:
    """Map `trace` to NeuroMC activity. stage/step/rank select fragments (a value or a list);
    recompute: "include" (the default), "exclude" (compat's default) or "only"."""
    if options:
        raise TypeError(f"the neuromc model takes no options {sorted(options)} (it takes stage, step, rank, recompute)")
    if compat not in COMPAT_MODES:
        raise ValueError(f"compat must be one of {COMPAT_MODES}, got {compat!r}")
    if recompute not in (None, *RECOMPUTE_CHOICES):
        raise ValueError(f"recompute must be one of {RECOMPUTE_CHOICES}, got {recompute!r}")
    spikingjelly = compat == "spikingjelly"
    selection = (stage, step, rank, recompute or recompute_default(MODEL, compat))
    install(trace.con)
    ignore_names = _ignore_names(ignore_modules)
    refusals, warnings, uncosted = [], [], []
    if trace.con.execute("SELECT count(*) FROM tensor_states WHERE is01 IS NULL AND NOT is_meta").fetchone()[0]:
        warnings.append("the trace lacks value statistics (is01) for some tensors: they count as non-spiking")
    modules = _module_part(trace, selection, spikingjelly, ignore_names, refusals, warnings, uncosted)
    optimizer = _optimizer_part(trace, selection, spikingjelly, refusals, uncosted)
    traced = _trace_part(trace, selection, spikingjelly, modules, refusals, uncosted)
    fragments = _assemble([modules, optimizer], traced, selection)
    del modules, optimizer, traced
    if not len(fragments):
        refusals.append("No NeuroMC-supported runtime fragments were recognized.")
        warnings.append("no NeuroMC fragment was recognised in the selection")
    uncosted = [u for u in uncosted if len(u)]
    uncosted_frame = pd.concat(uncosted, ignore_index=True) if uncosted else pd.DataFrame(columns=list(UNCOSTED_COLUMNS))
    for column in UNCOSTED_COLUMNS:
        if column not in uncosted_frame:
            uncosted_frame[column] = None
    result = Activity(fragments, memory_terms(fragments), uncosted_frame[list(UNCOSTED_COLUMNS)],
                      refusals, warnings, compat)
    if strict and refusals:
        raise ValueError(refusals[0])
    return result
