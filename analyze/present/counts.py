"""What `spiketrace counts` shows: a CounterResult as text tables or as one JSON document.

    from spiketrace.analyze import open_trace
    from spiketrace.analyze.counters import count
    from spiketrace.analyze.present.counts import counts_json, table_text
    with open_trace("runs/step") as trace:
        result = count(trace, ["flop", "mac"], stage="forward")
        document = counts_json(result, trace)
        print(table_text(result, "scope", depth=2))

Nothing here counts: the numbers come from spiketrace.analyze.counters; this module only arranges them
(and asks the trace which module class each scope is).

## The JSON document (a stable contract, see docs/counts_json.md)

    {
      "counters": {
        "<counter>": {
          "total": int,                                # value at scope "Global"
          "by_scope": {"<scope>": {"<op>": int}},      # SpikingJelly's get_counts() shape
          "unsupported": {"<op>": int},                # calls of ops of its kind no rule covers
          "coverage": float,                           # covered share of the applicable work, by bytes
          "coverage_calls": float,                     # the same by calls
          "not_applicable": {"<op>": int}              # calls of ops it does not apply to
        }
      },
      "trace": {"path": str, "schema_version": str, "complete": bool, "ranks": [int], "events": int,
                "degraded": {rank: [...]}, "compiled": bool, "compiled_seen": [str],
                "tracker_underflows": [...]},               # Trace.health(), what the capture said
      "selection": {"stage": str, "phase": str, "step": int, "rank": int, "module": str}
                                                     # the filters given (only when some were)
    }

- One entry per requested counter, in the order asked. Scopes are SpikingJelly tracker names
  ("Global", "Net", "Net.fc1"); a scope's value includes its sub-modules', "Global" holds all.
- `by_scope` sums over stages, phases, steps and ranks, whatever the result was grouped by.
- `coverage` is over the selected events that no ignored module touches and that the counter
  applies to (analyze/counters/applicability.py): the share of their tensor bytes some rule
  covers (`coverage_calls`: of their calls); 1.0 when nothing applies.
- `trace.events` counts every event of the trace, not only the selected ones.
- Evolution is additive only: keys may be added, none renamed, retyped or removed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import pandas as pd

from spiketrace.analyze.counters.result import CounterResult
from spiketrace.analyze.present.safe_text import safe, safe_line
from spiketrace.analyze.present.units import human, human_bytes
from spiketrace.analyze.trace import PROFILER_MARKER_PREFIX
from spiketrace.analyze.trace.facts import trace_json

VIEWS = ("scope", "op", "stage", "module-type")
# What each counter's values count: tables show bytes as bytes (B, KB, ...), the rest in K/M/G.
COUNTER_UNITS = {
    "flop": "FLOPs", "mac": "MACs", "ac": "ACs", "synop": "synaptic operations", "memory_access": "bytes",
    "neuromorphic_memory_access": "bytes",
    "neuron_state": "bytes and element operations added, as SpikingJelly's get_counts() adds them",
}
BYTE_COUNTERS = frozenset(name for name, unit in COUNTER_UNITS.items() if unit == "bytes")
# Stages the capture scenarios record, in the order a training step runs them.
STAGE_ORDER = ("forward", "loss", "backward", "optimizer")
OUTSIDE_LEAVES = "(outside leaf modules)"


# -- numbers -------------------------------------------------------------------------------


def percent(fraction: float) -> str:
    return f"{100 * fraction:.1f}%"


# -- facts taken from the result or the trace ------------------------------------------------


def counter_names(result: CounterResult) -> list[str]:
    """The counters of `result`, in the order they were asked for: those that counted nothing
    included (docs/counts_json.md promises every counter asked for a total, 0 or not)."""
    seen = [*result.counters, *result.frame["counter"], *result.unsupported.get("counter", [])]
    return list(dict.fromkeys(seen))


def scope_totals(frame: pd.DataFrame) -> pd.DataFrame:
    """counter, scope, op, value: a result's frame summed over its group columns (stage, ...)."""
    if frame.empty:
        return pd.DataFrame({"counter": [], "scope": [], "op": [], "value": []}).astype({"value": "int64"})
    return frame.groupby(["counter", "scope", "op"], as_index=False, sort=False)["value"].sum()


def tidy_frame(result: CounterResult, counters=None) -> pd.DataFrame:
    """The result's frame in a stable order: counters as asked, Global first then scopes by
    name, ops by name, stages in running order. What --format csv and parquet write."""
    frame = result.frame
    names = counter_names(result) if counters is None else list(counters)
    position = {name: i for i, name in enumerate(names)}
    groups = [c for c in ("stage", "phase", "step", "rank") if c in frame.columns]

    def key(row: tuple) -> tuple:  # one row per (counter, scope, op, group): no event loop
        counter, scope, op, *rest = row
        stage = [_stage_key(rest.pop(0))] if "stage" in groups else []
        return (position.get(counter, len(position)), scope != "Global", _natural(scope), op, *stage,
                *[str(v) for v in rest])

    rows = list(zip(*(frame[c] for c in ["counter", "scope", "op", *groups])))
    order = sorted(range(len(frame)), key=lambda i: key(rows[i]))
    return frame.iloc[order].reset_index(drop=True)


def coverage(result: CounterResult, counters=None, weight: str = "bytes") -> dict[str, float]:
    """counter -> fraction of the work it applies to that some rule covers (by tensor bytes,
    or by calls); ops it does not apply to (a view's FLOPs) are left out."""
    names = counter_names(result) if counters is None else list(counters)
    return {name: result.coverage(name, weight) for name in names}


def short_class(class_name) -> str:
    """`torch.nn.modules.linear.Linear` -> `Linear`: what a layer is, next to where it is."""
    return str(class_name).rsplit(".", 1)[-1]


def counts_json(result: CounterResult, trace, *, counters=None, selection=None) -> dict:
    """The documented JSON document (see the module docstring) of `result`.

    `counters`: the names asked for, so that a counter with nothing selected still appears;
    `selection`: the filters the result was counted with ({name: value}), when any."""
    document = {"counters": counters_json(result, counters), "trace": trace_json(trace)}
    if selection:
        document["selection"] = dict(selection)
    return document


def counters_json(result: CounterResult, counters=None) -> dict:
    """The document's `counters` entry: per counter its total, by_scope, coverage, ..."""
    names = counter_names(result) if counters is None else list(counters)
    fractions = coverage(result, names)
    totals = scope_totals(tidy_frame(result, names))
    document = {}
    for name in names:
        rows = totals[totals["counter"] == name]
        by_scope: dict[str, dict[str, int]] = {}
        for scope, op, value in zip(rows["scope"], rows["op"], rows["value"]):
            by_scope.setdefault(str(scope), {})[str(op)] = int(value)
        document[name] = {
            "total": sum(by_scope.get("Global", {}).values()),
            "by_scope": by_scope,
            "unsupported": result.unsupported_of(name),
            "coverage": fractions[name],
            "coverage_calls": result.coverage(name, "calls"),
            "not_applicable": result.not_applicable_of(name),
        }
        for family in sorted(set(result.details.loc[result.details["counter"] == name, "family"])):
            per_scope = result.details_of(name, family)  # scopes in a fixed order, whatever the engine's
            document[name][family] = {scope: per_scope[scope] for scope in sorted(per_scope, key=_scope_key)}
    return document


def strict_problem(result: CounterResult) -> str | None:
    """The first op some counter has no rule for (or SpikingJelly would abort on), or None."""
    unsupported, aborts = result.unsupported, result.aborts
    if len(unsupported):
        first = unsupported.iloc[0]
        return (f"strict: {first['counter']} has no rule for {first['op']} ({int(first['calls'])} calls); "
                f"{len(unsupported)} uncovered (counter, op) pairs in all")
    if len(aborts):
        first = aborts.iloc[0]
        return f"strict: SpikingJelly's {first['counter']} counter aborts on {first['op']} ({int(first['calls'])} calls)"
    return None


def coverage_problem(fractions: Mapping[str, float], minimum: float) -> str | None:
    """A message naming the counters whose coverage is below `minimum`, or None."""
    low = [f"{name} {percent(value)}" for name, value in fractions.items() if value < minimum]
    return f"coverage below {percent(minimum)}: {', '.join(low)}" if low else None


# -- text ------------------------------------------------------------------------------------


def _grid(header: list[str], rows: list[list[str]], indent: str = "") -> list[str]:
    """Aligned lines: the first column left-aligned, the others right-aligned; cells shown `safe`
    (a scope or op name from the trace may hold escape sequences)."""
    header, rows = [safe_line(c) for c in header], [[safe_line(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = []
    for row in [header, *rows]:
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
        lines.append((indent + "  ".join(cells)).rstrip())
    return lines


def value_text(counter: str, value) -> str:
    """A counter's value with its unit: bytes as 94.08KB, operations as 1.23K."""
    return (human_bytes if counter in BYTE_COUNTERS else human)(int(value))


def units_line(names: list[str]) -> str:
    """'units: flop FLOPs; memory_access bytes; ...' for the counters shown."""
    return "units: " + "; ".join(f"{n} {COUNTER_UNITS.get(n, 'as its rules count')}" for n in names)


def _natural(text: str):
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", text) if part]


def _scope_key(scope: str) -> tuple:
    """Global first, then scopes by name (block.2 before block.10)."""
    return (scope != "Global", _natural(str(scope)))


def scope_depth(scope: str) -> int:
    """Global 0, "Net" 1, "Net.fc1" 2, ..."""
    return 0 if scope == "Global" else len(scope.split("."))


def _tree_order(scopes, order: Mapping[str, int]) -> list[str]:
    """`scopes` depth first: Global, then each scope before its sub-scopes, siblings in module
    registration order where known, else naturally sorted (block.2 before block.10)."""
    present = set(scopes)
    children: dict[str, list[str]] = {}
    for scope in present - {"Global"}:
        parts = scope.split(".")
        parent = next((".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1) if ".".join(parts[:i]) in present),
                      "Global")
        children.setdefault(parent, []).append(scope)
    ordered: list[str] = []

    def visit(scope: str) -> None:
        ordered.append(scope)
        for child in sorted(children.get(scope, []), key=lambda s: (order.get(s, float("inf")), _natural(s))):
            visit(child)

    if "Global" in present:
        visit("Global")
    else:  # a frame without Global: start from the roots
        for root in sorted(children.get("Global", []), key=lambda s: (order.get(s, float("inf")), _natural(s))):
            visit(root)
    return ordered


def _by_scope(result: CounterResult, names: list[str], depth: int | None, modules: pd.DataFrame | None) -> list[str]:
    totals = scope_totals(result.frame)
    table = totals.pivot_table(index="scope", columns="counter", values="value", aggfunc="sum", fill_value=0)
    order = {} if modules is None else dict(zip(modules["scope"], modules["order"]))
    classes = {} if modules is None else dict(zip(modules["scope"], modules["class_name"].map(short_class)))
    rows = []
    for scope in _tree_order(table.index, order):
        level = scope_depth(scope)
        if depth is not None and level > depth:
            continue
        label = "  " * level + scope.split(".")[-1] + (f" ({classes[scope]})" if scope in classes else "")
        rows.append([label] + [value_text(n, table.at[scope, n]) if n in table.columns else "0" for n in names])
    if not rows:
        return ["(no counts)"]
    return _grid(["scope", *names], rows) + ["", "a scope's value includes its sub-modules'; Global holds everything",
                                             units_line(names)]


def _share(value: float, total: int) -> str:
    return percent(value / total) if total else "-"


def _by_op(result: CounterResult, names: list[str], top: int) -> list[str]:
    totals = scope_totals(result.frame)
    # torch.profiler's markers do no work: neuron_state lists every op, theirs at 0, in no op table
    totals = totals[~totals["op"].astype(str).str.startswith(PROFILER_MARKER_PREFIX)]
    lines: list[str] = []
    for name in names:
        rows = totals[(totals["counter"] == name) & (totals["scope"] == "Global")].sort_values(
            ["value", "op"], ascending=[False, True])
        total = int(rows["value"].sum())
        shown, rest = rows.head(max(top, 0)), rows.iloc[max(top, 0):]
        table = [[op, value_text(name, v), _share(v, total)] for op, v in zip(shown["op"], shown["value"])]
        if len(rest):
            others = int(rest["value"].sum())
            table.append([f"others ({len(rest)} ops)", value_text(name, others), _share(others, total)])
        table.append(["total", value_text(name, total), _share(total, total)])
        lines += ([""] if lines else []) + [f"{name} (scope Global)"] + _grid(["op", "value", "share"], table, "  ")
    return lines + ["", units_line(names)] if lines else ["(no counts)"]


def _stage_key(stage) -> tuple:
    if stage is None or pd.isna(stage):
        return (2, 0, "")
    return (0, STAGE_ORDER.index(stage), "") if stage in STAGE_ORDER else (1, 0, str(stage))


def _by_stage(result: CounterResult, names: list[str]) -> list[str]:
    frame = result.frame
    if "stage" not in frame.columns:
        raise ValueError("the stage table needs a result counted with by=('stage',)")
    globals_ = frame[frame["scope"] == "Global"]
    table = globals_.pivot_table(index="stage", columns="counter", values="value", aggfunc="sum", fill_value=0)
    rows = []
    for stage in sorted(table.index, key=_stage_key):
        rows.append([str(stage)] + [value_text(n, table.at[stage, n]) if n in table.columns else "0" for n in names])
    totals = result.totals()
    rows.append(["total"] + [value_text(n, totals.get(n, 0)) for n in names])
    return _grid(["stage", *names], rows) + ["", units_line(names)]


def _by_module_type(result: CounterResult, names: list[str], modules: pd.DataFrame | None) -> list[str]:
    if modules is None:
        raise ValueError("the module-type table needs the trace's modules (module_classes(trace))")
    leaves = modules[modules["is_leaf"].fillna(False).astype(bool)]
    classes = dict(zip(leaves["scope"], leaves["class_name"]))
    totals = scope_totals(result.frame)
    in_leaves = totals[totals["scope"].isin(list(classes))].assign(
        class_name=lambda f: f["scope"].map(classes))
    table = in_leaves.pivot_table(index="class_name", columns="counter", values="value", aggfunc="sum", fill_value=0)
    grand = result.totals()
    first = names[0] if names else None
    order = sorted(table.index, key=lambda c: (-int(table.at[c, first]) if first in table.columns else 0, c))
    rows = [[c] + [value_text(n, table.at[c, n]) if n in table.columns else "0" for n in names] for c in order]
    outside = [grand.get(n, 0) - (int(table[n].sum()) if n in table.columns else 0) for n in names]
    rows.append([OUTSIDE_LEAVES] + [value_text(n, v) for n, v in zip(names, outside)])
    rows.append(["total"] + [value_text(n, grand.get(n, 0)) for n in names])
    return _grid(["module type", *names], rows) + [
        "",
        "summed over leaf modules only (a parent's value already includes its children's, so adding",
        f"containers would count twice); {OUTSIDE_LEAVES} is what ran in containers' own code or",
        "outside any module (loss, optimizer)",
        units_line(names),
    ]


def coverage_text(
    result: CounterResult, names: list[str], fractions: Mapping[str, float] | None = None, top: int | None = None
) -> list[str]:
    """Per counter: the ops no rule covers (the `top` most called; None = all), with their
    calls and tensor volume, or "all ops covered"."""
    lines = ["coverage (of the work each counter applies to, by tensor bytes):"]
    for name in names:
        rows = result.unsupported[result.unsupported["counter"] == name] if len(result.unsupported) else result.unsupported
        parts = [f"{percent(fractions[name])} covered ({percent(result.coverage(name, 'calls'))} of calls)"] \
            if fractions and name in fractions else []
        parts.append(f"{len(rows)} op{'s' if len(rows) != 1 else ''} without a rule ({int(rows['calls'].sum())} calls)"
                     if len(rows) else "every op it applies to has a rule")
        exempt = result.not_applicable_of(name)
        if exempt:
            parts.append(f"{len(exempt)} op{'s' if len(exempt) != 1 else ''} not applicable ({sum(exempt.values())} calls)")
        lines.append(f"  {name}: " + "; ".join(parts))
        shown, rest = (rows, rows.iloc[:0]) if top is None else (rows.head(top), rows.iloc[top:])
        table = [[op, str(int(n)), human_bytes(int(b))] for op, n, b in zip(shown["op"], shown["calls"], shown["tensor_bytes"])]
        if len(rest):
            table.append([f"... {len(rest)} more op{'s' if len(rest) > 1 else ''}", str(int(rest["calls"].sum())),
                          human_bytes(int(rest["tensor_bytes"].sum()))])
        lines += _grid(["op without a rule", "calls", "tensors"], table, "    ") if table else []
    return lines


def table_text(
    result: CounterResult,
    by: str = "scope",
    depth: int | None = None,
    top: int = 10,
    *,
    modules: pd.DataFrame | None = None,
    coverage: Mapping[str, float] | None = None,
    counters=None,
) -> str:
    """The text report: the table `by` asks for, then the coverage block.

    by: "scope" (module tree down to `depth`, None = all), "op" (per counter the `top` ops at
    Global, "others", "total"; `top` also bounds the uncovered ops listed), "stage" (result counted
    with by=("stage",)) or "module-type" (needs `modules` = module_classes(trace),
    analyze/trace/facts.py). `modules` also orders the scope tree the way the model registers its
    modules. `coverage`: counter -> fraction, shown when given."""
    names = counter_names(result) if counters is None else list(counters)
    if by == "scope":
        lines = _by_scope(result, names, depth, modules)
    elif by == "op":
        lines = _by_op(result, names, top)
    elif by == "stage":
        lines = _by_stage(result, names)
    elif by == "module-type":
        lines = _by_module_type(result, names, modules)
    else:
        raise ValueError(f"unknown table {by!r}; choose from {VIEWS}")
    return safe("\n".join(lines + [""] + coverage_text(result, names, coverage, top)))
