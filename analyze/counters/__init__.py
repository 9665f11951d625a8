"""Offline op counters equal to SpikingJelly 2.0.0's online ones, from a trace.

    from spiketrace.analyze import open_trace
    from spiketrace.analyze.counters import counts
    with open_trace("runs/step") as trace:
        frame = counts(trace, ["flop", "ac"], stage="forward")
        frame.attrs["unsupported"]            # ops no rule covers, per counter
        as_spikingjelly(frame, "flop")        # {scope: {op: n}}, like get_counts()

Each counter is a rule table (op -> SQL expression) in its own module; see engine.py for how
tables are evaluated and attributed to scopes.
"""

from __future__ import annotations

import pandas as pd

from spiketrace.analyze.counters import ac, flop, mac, memory_access, neurobench, synop, user_rules
from spiketrace.analyze.counters.engine import COMPAT_MODES, count_events
from spiketrace.analyze.counters.filters import RECOMPUTE_CHOICES, recompute_clause, where_sql
from spiketrace.analyze.counters.neurobench.metrics import NeuroBenchResults, neurobench_metrics
from spiketrace.analyze.counters.neuromorphic_memory_access import neuromorphic_memory_access
from spiketrace.analyze.counters.neuron_state import neuron_state
from spiketrace.analyze.counters.result import CounterResult, StrictModeError
from spiketrace.analyze.counters.sql import MACROS
from spiketrace.analyze.trace import accepts_path
from spiketrace.analyze.trace.statistics_level import require_level

COUNTERS = {"flop": flop, "memory_access": memory_access, "mac": mac, "ac": ac, "synop": synop}
# Module-level counters: their "op" column holds the metric (e.g. weight_read_bytes).
MODULE_COUNTERS = {"neuromorphic_memory_access": neuromorphic_memory_access}
# Counters replayed as a state machine over the op stream (see neuron_state.py).
STATEFUL_COUNTERS = {"neuron_state": neuron_state}
ALL_COUNTERS = (*COUNTERS, *MODULE_COUNTERS, *STATEFUL_COUNTERS)
GROUPS = ("stage", "phase", "step", "rank")

CONVENTIONS = neurobench.CONVENTIONS
_where = where_sql  # the name the energy models import

__all__ = ["COUNTERS", "COMPAT_MODES", "CONVENTIONS", "RECOMPUTE_CHOICES", "CounterResult", "NeuroBenchResults",
           "StrictModeError", "as_spikingjelly", "count", "counts", "load_rules", "neurobench_metrics", "recompute_clause",
           "register_rule"]


def register_rule(op: str, counter: str, rule: str) -> str:
    """Add a rule (SQL over the op's facts) for `op` to the per-op `counter`; see user_rules.py."""
    return user_rules.register(op, counter, rule, COUNTERS)


def load_rules(path) -> list[tuple[str, str]]:
    """Register the rules of a TOML file ([counter] tables of "op" = "rule"); see user_rules.py."""
    return user_rules.load(path, COUNTERS)


def _ignore_names(ignore_modules) -> list[str]:
    names = []
    for item in ignore_modules or ():
        names.append(item if isinstance(item, str) else f"{item.__module__}.{item.__qualname__}")
    return names


@accepts_path
def count(
    trace,
    counters=None,
    *,
    stage=None,
    phase=None,
    step=None,
    rank=None,
    module=None,
    ops=None,
    by: tuple[str, ...] | list[str] = (),
    ignore_modules=None,
    compat: str | None = None,
    strict: bool = False,
    recompute: str | None = None,
    convention: str | None = None,
    chunk_events: int = 500_000,
    progress: bool = False,
) -> CounterResult:
    """Run `counters` (names; all five by default) over the selected events of `trace`,
    streamed in chunks of `chunk_events` events (memory stays bounded).

    `recompute` ("include", the default; "exclude"; "only"): what to do with the work
    activation checkpointing recomputed during backward (see recompute_clause).
    `progress`: a bar over the chunks on a terminal (the CLI asks for it).
    `convention="neurobench"`: synop and mac as NeuroBench's SynapticOperations counts them
    (Effective_ACs and Effective_MACs, totals over the samples in frame.attrs["samples"]; see
    analyze/counters/neurobench.py)."""
    if convention is not None:
        return _neurobench(trace, counters, stage=stage, phase=phase, step=step, rank=rank, module=module, ops=ops,
                           by=by, ignore_modules=ignore_modules, compat=compat, strict=strict, recompute=recompute,
                           convention=convention)
    names = list(COUNTERS) if counters is None else [counters] if isinstance(counters, str) else list(counters)
    unknown = [n for n in names if n not in ALL_COUNTERS]
    if unknown:
        raise ValueError(f"unknown counter(s) {unknown}; choose from {sorted(ALL_COUNTERS)}")
    bad_groups = [g for g in by if g not in GROUPS]
    if bad_groups:
        raise ValueError(f"cannot group by {bad_groups}; choose from {GROUPS}")
    for name in names:  # a rule must not read a statistic the capture did not take as "no spike"
        require_level(trace, f"counter {name}")
    ignored = _ignore_names(ignore_modules)
    result = count_events(
        trace.con,
        {n: COUNTERS[n] for n in names if n in COUNTERS},
        where=_where(stage, phase, step, rank, module, ops, recompute),
        group_by=tuple(by),
        ignore_modules=ignored,
        compat=compat,
        strict=strict,
        chunk_events=chunk_events,
        progress=progress,
    )
    module_names = [n for n in names if n in MODULE_COUNTERS]
    if module_names and (module is not None or ops is not None or by):
        raise ValueError(f"{module_names}: module-level counters take stage/phase/step/rank filters only")
    for name in (n for n in names if n in STATEFUL_COUNTERS):
        for macro in MACROS:
            trace.con.execute(macro)
        frame, details = STATEFUL_COUNTERS[name](
            trace.con, where=_where(stage, phase, step, rank, module, ops, recompute), group_by=tuple(by),
            ignore_modules=ignored, compat=compat,
        )
        frame = frame.assign(counter=name)[["counter", "scope", "op", *by, "value"]]
        result.frame = pd.concat([f for f in (result.frame, frame) if len(f)] or [frame], ignore_index=True)
        result.details = pd.concat([result.details, details.assign(counter=name)], ignore_index=True)
    for name in module_names:
        for macro in MACROS:
            trace.con.execute(macro)
        frame = MODULE_COUNTERS[name](trace, ignored, where=_where(stage, phase, step, rank, recompute=recompute),
                                      compat=compat)
        frame = frame.rename(columns={"metric": "op"}).assign(counter=name)[["counter", "scope", "op", "value"]]
        result.frame = pd.concat([result.frame, frame], ignore_index=True)
    result.counters = tuple(names)
    return result


def _neurobench(trace, counters, *, stage, phase, step, rank, module, ops, by, ignore_modules, compat, strict,
                recompute, convention) -> CounterResult:
    if convention not in CONVENTIONS:
        raise ValueError(f"convention must be one of {CONVENTIONS}, got {convention!r}")
    if compat is not None:
        raise ValueError("convention and compat are exclusive: compat reproduces SpikingJelly's counters")
    names = list(neurobench.COUNTERS) if counters is None else [counters] if isinstance(counters, str) else list(counters)
    others = [n for n in names if n not in neurobench.COUNTERS]
    if others:
        raise ValueError(f"the neurobench convention defines synop (Effective_ACs) and mac (Effective_MACs) only, "
                         f"not {others}")
    bad_groups = [g for g in by if g not in GROUPS]
    if bad_groups:
        raise ValueError(f"cannot group by {bad_groups}; choose from {GROUPS}")
    for macro in MACROS:
        trace.con.execute(macro)
    result = neurobench.count(
        trace.con, names, where=_where(stage, phase, step, rank, module, ops, recompute),
        module_where=_where(stage, phase, step, rank, recompute=recompute), group_by=tuple(by),
        ignore_modules=_ignore_names(ignore_modules), strict=strict,
        trace_versions={r: m.get("schema_version", "1.0") for r, m in trace.manifests.items()})
    result.counters = tuple(names)  # an ANN's synop, a spiking net's mac: asked for, so shown at 0
    return result


@accepts_path
def counts(trace, counters=None, **options) -> pd.DataFrame:
    """Tidy counts (counter, scope, op, value [, stage, phase, step, rank as asked with by=]).

    `frame.attrs["unsupported"]` lists, per counter, the ops no rule covers (calls and
    tensor bytes involved); `frame.attrs["aborts"]` the ops SpikingJelly would abort on
    (compat mode only)."""
    result = count(trace, counters, **options)
    frame = result.frame
    samples = frame.attrs.get("samples")  # the neurobench convention's
    frame.attrs["unsupported"] = result.unsupported
    frame.attrs["aborts"] = result.aborts
    if options.get("convention") is not None:
        frame.attrs["samples"] = samples
    return frame


def as_spikingjelly(frame: pd.DataFrame, counter: str) -> dict[str, dict[str, int]]:
    """{scope: {op: value}} for one counter, the shape of SpikingJelly's get_counts()."""
    return CounterResult(frame, pd.DataFrame()).spikingjelly(counter)
