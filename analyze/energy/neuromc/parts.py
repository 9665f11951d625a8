"""One mapping pass over what a trace shows (the whole trace, or a range of its steps): the
facts NeuroMC's activity is made of, in a form that adds up over ranges.

`map_part` maps module, optimizer and trace fragments (modules.py, optimizer.py,
fallback.py), keeps the selected ones compacted into kinds (kinds.py), and keeps what the
activity says about the rest as facts, not yet as messages: whether a refusal applies, the
uncosted work per name with its stages and modules as sets, the modules' push/pop balance.
`activity` (mapper.py) adds the facts of every part up and words them once, so that a trace
mapped in ranges words its refusals, warnings and uncosted rows as the trace mapped whole.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from spiketrace.analyze import neurons
from spiketrace.analyze.energy.neuromc import kinds as fragment_kinds
from spiketrace.analyze.energy.neuromc import rules
from spiketrace.analyze.energy.neuromc.fallback import trace_fragments, uncosted_ops
from spiketrace.analyze.energy.neuromc.modules import module_fragments
from spiketrace.analyze.energy.neuromc.optimizer import optimizer_fragments

# Uncosted work, kept per kind of row (slot) in the order the activity lists them; a slot's
# rows are keyed by name (op rows) or by name and reason (call rows).
SLOTS = ("conv3d", "bad_layout", "optimizer", "failed", "ops")
OP_SLOTS = ("failed", "ops")
SUMS = ("calls", "input_elements", "output_elements", "bytes_read", "bytes_written")


@dataclass
class Part:
    """What one mapping pass found (see the module docstring)."""

    kinds: pd.DataFrame  # the selected fragment parts, compacted (kinds.compact)
    places: pd.DataFrame
    module_signatures: pd.DataFrame | None  # compat: every module fragment's signature, selected or not
    uncosted: dict[str, pd.DataFrame] = field(default_factory=dict)  # slot -> rows, stages/modules as sets
    values_missing: bool = False  # some tensor lacks is01
    conv3d: bool = False  # compat: a Conv3d module ran
    bad_layout: bool = False
    unpaired: bool = False
    potential_warnings: list[str] = field(default_factory=list)
    leftovers: pd.DataFrame | None = None  # path, class_name, balance, pops per module
    optimizer_problems: set = field(default_factory=set)
    other_optimizer: str | None = None  # the class of the first optimizer NeuroMC has no model for
    first_error: str | None = None  # the first fallback op SpikingJelly's fallback fails on
    conv_backward: tuple[int, int] = (0, 0)  # compat: convolution_backward events, conv module backward calls
    conv_backward_ops: pd.DataFrame | None = None  # compat: their selected rows, uncosted unless they fit the calls


def selected(frame: pd.DataFrame, stage, step, rank, recompute=None) -> pd.DataFrame:
    for column, value in (("stage", stage), ("step", step), ("rank", rank)):
        if value is not None and len(frame):
            values = value if isinstance(value, (list, tuple, set)) else [value]
            frame = frame[frame[column].isin(list(values))]
    if recompute in ("exclude", "only") and len(frame):  # rows without the flag (optimizer) are not recomputed
        flag = frame["recompute"].fillna(False).astype(bool) if "recompute" in frame else pd.Series(False, frame.index)
        frame = frame[flag if recompute == "only" else ~flag]
    return frame


def _names(values) -> frozenset:
    return frozenset(v for v in values if isinstance(v, str) and v)


def _op_rows(ops: pd.DataFrame) -> pd.DataFrame:
    """Uncosted op events -> one row per op: calls, tensor volumes, its stages and modules."""
    if not len(ops):
        return pd.DataFrame()
    grouped = ops.groupby("op", as_index=False).agg(
        calls=("seq", "size"), input_elements=("input_elements", "sum"), output_elements=("output_elements", "sum"),
        bytes_read=("bytes_read", "sum"), bytes_written=("bytes_written", "sum"),
        stages=("stage", _names), modules=("module", _names), reason=("reason", "first"))
    return grouped.rename(columns={"op": "name"}).assign(kind="op")


def _call_rows(frame: pd.DataFrame, kind: str, name, reason, elements: str) -> pd.DataFrame:
    """Uncosted module calls or optimizer steps -> one row per (name, reason); calls are
    distinct (rank, seq): a call has several rows (an optimizer step one per parameter)."""
    if not len(frame):
        return pd.DataFrame()
    return frame.assign(name=name, reason=reason, call=list(zip(frame["rank"], frame["seq"]))).groupby(
        ["name", "reason"], as_index=False).agg(calls=("call", "nunique"), input_elements=(elements, "sum"),
                                                stages=("stage", _names), modules=("module", _names)).assign(kind=kind)


def _modules(trace, part: Part, selection, spikingjelly, ignore_names) -> pd.DataFrame:
    modules, balances = module_fragments(trace, compat=spikingjelly, ignore_names=ignore_names,
                                         recompute=selection[3] != "exclude")
    refused = pd.Series(False, index=modules.index)
    conv3d = modules["module_kind"] == "conv3d"
    if spikingjelly and conv3d.any():
        part.conv3d = True
        part.uncosted["conv3d"] = _call_rows(selected(modules[conv3d], *selection), "module", "torch.nn.Conv3d",
                                             "SpikingJelly refuses models with Conv3d", "mac_count")
        refused |= conv3d
    bad = modules["bad_layout"].fillna(False).astype(bool)
    if bad.any():
        part.bad_layout = True
        part.uncosted["bad_layout"] = _call_rows(selected(modules[bad], *selection), "module",
                                                 modules.loc[bad, "op_name"],
                                                 "a multi-step module's tensor has fewer than 3 dims", "input_numel")
        refused |= bad
    part.unpaired = bool(modules["unpaired"].fillna(False).astype(bool).any())
    somas = set(modules.loc[modules["module_kind"] == "soma", "module"])
    for path, name, potentials in neurons.several_potentials(trace, "neuromc", "spikingjelly" if spikingjelly else None):
        if path in somas:
            part.potential_warnings.append(
                f"{path} ({name}) integrates {len(potentials)} state variables per step ({', '.join(potentials)}); "
                "NeuroMC's soma holds one membrane potential: it is costed as one soma per output element and "
                f"step, the other state ({', '.join(potentials[:-1])}) is not costed")
    part.leftovers = balances
    return modules[~refused]


def _optimizer(trace, part: Part, selection, spikingjelly) -> pd.DataFrame:
    optimizer, refused, problems, other = optimizer_fragments(trace, compat=spikingjelly)
    part.optimizer_problems, part.other_optimizer = problems, other
    if len(refused):
        refused = selected(refused, *selection)
        part.uncosted["optimizer"] = _call_rows(refused, "optimizer", refused["name"], refused["reason"], "numel")
    return optimizer


def _traced(trace, part: Part, selection, spikingjelly) -> pd.DataFrame:
    traced, events = trace_fragments(trace, compat=spikingjelly, recompute=selection[3] != "exclude")
    failed = events[events["error"].notna()]
    if len(failed):
        part.first_error = failed["error"].iloc[0]
        part.uncosted["failed"] = _op_rows(selected(failed, *selection).assign(
            reason=failed["error"], input_elements=failed["x_numel"], output_elements=failed["out_numel"],
            bytes_read=None, bytes_written=None))
    ops, conv_backward = uncosted_ops(trace, events, compat=spikingjelly)
    if conv_backward is not None:
        part.conv_backward = (int(conv_backward["events"]), int(conv_backward["calls"]))
        part.conv_backward_ops = _op_rows(selected(conv_backward["rows"], *selection))
    part.uncosted["ops"] = _op_rows(selected(ops, *selection))
    return traced


def map_part(trace, selection, spikingjelly: bool, ignore_names) -> Part:
    """The facts of everything `trace` shows (see the module docstring). `selection` is
    (stage, step, rank, recompute): the fragments and uncosted rows kept."""
    part = Part(pd.DataFrame(), pd.DataFrame(), None)
    part.values_missing = bool(trace.con.execute(
        "SELECT count(*) FROM tensor_states WHERE is01 IS NULL AND NOT is_meta").fetchone()[0])
    modules = _modules(trace, part, selection, spikingjelly, ignore_names)
    optimizer = _optimizer(trace, part, selection, spikingjelly)
    traced = _traced(trace, part, selection, spikingjelly)
    if spikingjelly and len(modules):  # SpikingJelly drops trace fragments that repeat any module fragment
        part.module_signatures = fragment_kinds.module_signatures(modules)
    columns = [*rules.FRAGMENT_COLUMNS, "recompute"]
    frames = [frame.reindex(columns=columns).assign(order_group=group)
              for group, frame in ((0, modules), (0, optimizer), (1, traced)) if len(frame)]
    del modules, optimizer, traced
    rows = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=[*columns, "order_group"])
    rows = selected(rows, *selection).drop(columns="recompute")
    part.kinds, part.places = fragment_kinds.compact(rows)
    return part


def added_uncosted(parts: list[Part], slot: str, extra: list[pd.DataFrame] | tuple[()] = ()) -> pd.DataFrame:
    """The rows of `slot` over every part (and `extra` ones), added per key: sums added,
    stages and modules joined, the first reason kept."""
    frames = [f for f in (*(p.uncosted.get(slot) for p in parts), *extra) if f is not None and len(f)]
    if not frames:
        return pd.DataFrame()
    frame = pd.concat(frames, ignore_index=True)
    keys = ["name"] if slot in OP_SLOTS else ["name", "reason"]
    aggregations = {c: (c, "sum") for c in SUMS if c in frame} | {
        "stages": ("stages", lambda sets: ", ".join(sorted(frozenset().union(*sets)))),
        "modules": ("modules", lambda sets: ", ".join(sorted(frozenset().union(*sets)))),
        "kind": ("kind", "first")}
    if slot in OP_SLOTS:
        aggregations["reason"] = ("reason", "first")
    return frame.groupby(keys, as_index=False).agg(**aggregations)
