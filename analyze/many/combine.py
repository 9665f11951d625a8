"""Adding up partial results: the counts and energies of several shards (ranks of one trace)
or of several traces, and what a combination of several traces holds.

Counts are sums over events, each event of one rank, so the counts of a trace are the sums of
its ranks' counts, exactly: every frame of a CounterResult adds up row by row, except the one
number that is a size (neuron_state's potential buffer, the largest one any scope needs),
which combines by max. An energy report's rows (`report.to_frame()`) add up the same way for
the models whose energies are sums over ranks (RANK_ADDITIVE_MODELS, checked by
tests/test_dask_engine.py); over traces every energy and count adds up, and the rows that are
sizes of hardware combine as SIZE_ROWS says.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from spiketrace.analyze.counters.result import CounterResult
from spiketrace.analyze.energy.breakdown import TOTAL_KEYS, total_of
from spiketrace.analyze.many.traces import TraceFacts, modules_of

# Models whose report rows, summed over a trace's ranks, equal the report of the whole trace.
# lemaire is not: its qualia convention pools spike rates over every call of every rank, and its
# buffer sizes are maxima; spikesim is not: its area, stage count and unsupported work describe
# the network once, whatever the number of ranks. Those two are evaluated whole trace by whole trace.
RANK_ADDITIVE_MODELS = ("compute", "neuromc")
# Of those, the models and counters whose numbers, summed over the step ranges of a rank
# (analyze/trace/step_ranges.py), equal the rank's (tests/test_step_shards.py): every
# fragment, op and module call is one step's. neuron_state is not among them: it replays which storages hold neuron state
# along the op stream, and a neuron not reset between steps carries its state (snapshots and
# state-writing outputs of an earlier step) into the next.
STEP_ADDITIVE_MODELS = ("compute", "neuromc")
STEP_ADDITIVE_COUNTERS = ("flop", "memory_access", "mac", "ac", "synop", "neuromorphic_memory_access")

# Rows of a report that are sizes of hardware, not amounts of work: (breakdown, key or None for
# every key) -> how several traces combine them. "max": the largest any trace needs (lemaire's
# buffer capacities, each already the largest over its layers); "per trace": nothing combines
# them (spikesim's area is that of one network's crossbars), so a combination of several traces
# leaves them out and each trace's own result keeps them.
SIZE_ROWS = {("buffer", None): "max", ("area", None): "per trace", ("total", "area_mm2"): "per trace"}
# CounterResult.details rows that are sizes: (counter, family, metric), combined by max.
DETAIL_MAXIMA = {("neuron_state", "projection", "potential_buffer_bytes")}


def _added(frames: list[pd.DataFrame], keys: list[str], values: list[str], maxima=None) -> pd.DataFrame:
    """The rows of `frames` added per `keys` (first-seen order); `maxima` (a boolean Series
    over the concatenated rows) marks rows combined by max instead."""
    frames = [f for f in frames if f is not None and len(f)]
    if not frames:
        return pd.DataFrame({**{k: pd.Series([], dtype=object) for k in keys},
                             **{v: pd.Series([], dtype="int64") for v in values}})
    frame = pd.concat(frames, ignore_index=True)
    if maxima is None:
        return frame.groupby(keys, sort=False, dropna=False, as_index=False)[values].sum()
    marks = maxima(frame)
    summed = frame[~marks].groupby(keys, sort=False, dropna=False, as_index=False)[values].sum()
    largest = frame[marks].groupby(keys, sort=False, dropna=False, as_index=False)[values].max()
    return pd.concat([summed, largest], ignore_index=True)


def _sorted_uncovered(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """Counter, then most calls first, then op: the order spiketrace.analyze.counters gives these tables."""
    frame = frame.sort_values(["counter", "calls", "op"], ascending=[True, False, True], ignore_index=True)
    return frame[columns].astype({c: "int64" for c in columns if c in ("calls", "tensor_bytes")})


def _added_attrs(results: list[CounterResult]) -> dict:
    """What the NeuroBench convention says beside its counts (frame.attrs), of several results:
    the samples its totals are over, a sum over steps and ranks as the counts are (unknown in
    one result: unknown), and its notes, each once."""
    attrs = [r.frame.attrs for r in results]
    added = {}
    if any("samples" in a for a in attrs):
        samples = [a.get("samples") for a in attrs]
        added["samples"] = None if any(s is None for s in samples) else sum(samples)
    for key in ("samples_notes", "notes"):
        if any(key in a for a in attrs):
            added[key] = list(dict.fromkeys(note for a in attrs for note in a.get(key, [])))
    return added


def add_counter_results(results: list[CounterResult]) -> CounterResult:
    """One CounterResult of several (of the ranks of a trace, or of traces): every count added."""
    if len(results) == 1:
        return results[0]
    first = next((r.frame for r in results if len(r.frame)), results[0].frame)
    groups = [c for c in first.columns if c not in ("counter", "scope", "op", "value")]
    keys = ["counter", "scope", "op", *groups]
    frame = _added([r.frame for r in results], keys, ["value"])
    order = {name: i for i, name in enumerate(dict.fromkeys(c for r in results for c in r.frame["counter"]))}
    frame = (frame.assign(_counter=frame["counter"].map(order)).sort_values(["_counter", "scope", "op", *groups],
                                                                            ignore_index=True, kind="stable")
             .drop(columns="_counter")[[*keys, "value"]].astype({"value": "int64"}))
    frame.attrs = _added_attrs(results)
    uncovered = {}
    for name in ("unsupported", "not_applicable", "aborts"):
        columns = ["counter", "op", "calls", *(["tensor_bytes"] if name != "aborts" else [])]
        added = _added([getattr(r, name) for r in results], ["counter", "op"], columns[2:])
        uncovered[name] = _sorted_uncovered(added, columns)
    detail_keys = ["counter", "family", "scope", "metric"]
    details = _added([r.details for r in results], detail_keys, ["value"], maxima=lambda f: pd.Series(
        [(c, fam, m) in DETAIL_MAXIMA for c, fam, m in zip(f["counter"], f["family"], f["metric"])], index=f.index))
    # each part lists its scopes in whatever order its query returned them: metric by metric as
    # the counter gives them, scopes by name, so every combination comes out the same
    positions = {k: {v: i for i, v in enumerate(dict.fromkeys(details[k]))} for k in ("counter", "family", "metric")}
    details = details.sort_values(["counter", "family", "metric", "scope"], key=lambda column: column.map(
        positions[column.name]) if column.name in positions else column, ignore_index=True, kind="stable")
    group_totals = None
    each_totals = [r.group_totals for r in results if r.group_totals is not None]
    if len(each_totals) == len(results):
        columns = list(each_totals[0].columns)
        group_totals = _added(each_totals, columns[:-1], ["value"])
        group_totals = group_totals.sort_values(columns[:-1], ignore_index=True).astype({"value": "int64"})
    return CounterResult(
        frame=frame,
        unsupported=uncovered["unsupported"],
        aborts=uncovered["aborts"],
        selected_events=sum(r.selected_events for r in results),
        selected_bytes=sum(r.selected_bytes for r in results),
        not_applicable=uncovered["not_applicable"],
        details=details.astype({"value": "int64"}),
        group_totals=group_totals,
        counters=tuple(dict.fromkeys(name for r in results for name in r.counters)),
    )


@dataclass
class EnergyPart:
    """An energy report as rows (the model's `report.to_frame()`: breakdown, key, pj, count, and
    the model's other columns) and its warnings: what a shard or a trace gives back. It answers
    to_frame(), to_json() and `warnings` as the model's report does, so a trace's report shows
    the same whichever engine evaluated it."""

    frame: pd.DataFrame
    warnings: list[str] = field(default_factory=list)
    # the report's JSON document (report.to_json()), when the work asked for it (EnergyWork's
    # `documents`): only a whole trace's evaluation has one, so parts added up have none
    document: dict | None = None

    def to_frame(self) -> pd.DataFrame:
        return self.frame

    def to_json(self) -> dict:
        if self.document is None:
            raise ValueError("this energy result holds no report document: evaluate with documents=True")
        return self.document


def _size_rule(breakdown, key) -> str | None:
    return SIZE_ROWS.get((breakdown, key), SIZE_ROWS.get((breakdown, None)))


def _identity(values) -> tuple:
    """A row's key values, NaN as None (NaN is no dictionary key: it equals nothing)."""
    return tuple(None if isinstance(v, float) and math.isnan(v) else v for v in values)


def _merged_order(frame: pd.DataFrame, identity: list[str], group: list[str]) -> dict[tuple, tuple[int, int]]:
    """A sortable position per row identity of the concatenated parts: the rows in the order of
    the first part; a row another part adds goes after the last row of its group so far (its
    breakdown, for a recost under its preset), else after the row it follows in its part, and
    after the rows added there before it. So reports holding the same rows keep their order,
    and a step or an op only a later shard holds joins the rows of its breakdown."""
    positions: dict[tuple, tuple[int, int]] = {}
    last: dict[tuple, tuple[int, int]] = {}
    added = 0
    previous, part, first = (-1, 0), None, frame["_part"].iloc[0]
    groups = zip(*(frame[c] for c in group))
    for row, of_group, in_part in zip(zip(*(frame[c] for c in identity)), groups, frame["_part"]):
        if in_part != part:
            previous, part = (-1, 0), in_part
        row, of_group = _identity(row), _identity(of_group)
        if row not in positions:
            added += 1
            positions[row] = (len(positions), 0) if in_part == first else (last.get(of_group, previous)[0], added)
        position = positions[row]
        if position > last.get(of_group, (-1, 0)):
            last[of_group] = position
        previous = position
    return positions


def add_energy_parts(parts: list[EnergyPart], *, sizes: bool = False, keys: tuple[str, ...] = ()) -> EnergyPart:
    """One report of several: each row (breakdown, key) added over the parts. Over the shards of
    a trace (`sizes` False) every row is an amount; over traces (`sizes` True) the rows SIZE_ROWS
    names combine as it says. A key a report repeats (its n-th occurrence) stays a row of its own.
    `keys`: more columns that tell rows apart (a recost's preset and swept values)."""
    if len(parts) == 1:
        return parts[0]
    columns = list(dict.fromkeys(c for p in parts for c in p.frame.columns))
    named = [*keys, "breakdown", "key"]
    frames = [p.frame.assign(_occurrence=p.frame.groupby(named, sort=False, dropna=False).cumcount(), _part=i)
              for i, p in enumerate(parts) if len(p.frame)]
    if not frames:
        return EnergyPart(parts[0].frame, list(dict.fromkeys(w for p in parts for w in p.warnings)))
    frame = pd.concat(frames, ignore_index=True)
    identity = [*named, "_occurrence"]
    numbers = [c for c in columns if c not in named and pd.api.types.is_numeric_dtype(frame[c])]
    texts = [c for c in columns if c not in (*named, *numbers)]
    rules = [_size_rule(b, k) if sizes else None for b, k in zip(frame["breakdown"], frame["key"])]
    frame = frame.assign(_rule=rules)
    frame = frame[frame["_rule"] != "per trace"]
    grouped = frame.groupby(identity, sort=False, dropna=False)
    added = grouped[numbers].sum(min_count=1)
    largest = grouped[numbers].max()
    by_max = grouped["_rule"].first().eq("max")
    added.loc[by_max, numbers] = largest.loc[by_max, numbers]
    added = added.join(grouped[texts].first()) if texts else added
    positions = _merged_order(frame, identity, named[:-1])
    added = added.reset_index()
    added = added.assign(_position=[positions[_identity(row)] for row in zip(*(added[c] for c in identity))])
    added = added.sort_values("_position", kind="stable")
    warnings = list(dict.fromkeys(w for p in parts for w in p.warnings))
    return EnergyPart(added[columns].reset_index(drop=True), warnings)


@dataclass
class CombinedCounts:
    """The counts of several traces: `total` every trace's counts added, `by_trace` each one's
    (label -> CounterResult), `traces` what each trace said about itself (in the order named)."""

    total: CounterResult
    by_trace: dict[str, CounterResult]
    traces: list[TraceFacts]

    def totals_by_trace(self) -> pd.DataFrame:
        """trace, counter, value: each counter's total (scope Global) per trace."""
        rows = [(label, counter, value) for label, result in self.by_trace.items()
                for counter, value in result.totals().items()]
        return pd.DataFrame(rows, columns=["trace", "counter", "value"]).astype({"value": "int64"})

    def modules(self) -> pd.DataFrame:
        """Every trace's module classes (scope, class_name, is_leaf, order), each scope once."""
        return modules_of(self.traces)


@dataclass
class CombinedEnergy:
    """The energy of several traces under one model and preset: `frame` the rows of every trace's
    report added (sizes as SIZE_ROWS says), `by_trace` each trace's rows, `warnings` the reports',
    `documents` each trace's report as JSON (`report.to_json()`; only when asked: `documents=True`)."""

    model: str
    preset: str
    frame: pd.DataFrame
    by_trace: dict[str, pd.DataFrame]
    warnings: list[str]
    traces: list[TraceFacts]
    documents: dict[str, dict] = field(default_factory=dict)

    @property
    def energy_total_pj(self) -> float:
        return total_of(self.frame)

    def totals_by_trace(self) -> pd.DataFrame:
        """trace, energy_total_pj: each trace's total."""
        return pd.DataFrame({"trace": list(self.by_trace),
                             "energy_total_pj": [total_of(f) for f in self.by_trace.values()]})

    def modules(self) -> pd.DataFrame:
        return modules_of(self.traces)

    def report(self) -> EnergyPart:
        """The report of the one trace evaluated (rows, warnings and, if asked, its document): it
        shows as that trace's own report does."""
        if len(self.traces) != 1:
            raise ValueError(f"report() is one trace's; these are {len(self.traces)} (see frame, by_trace)")
        return EnergyPart(self.frame, list(self.warnings), self.documents.get(self.traces[0].label))


@dataclass
class CombinedRecost:
    """A recost of several traces: `frame` every trace's rows (one per preset and breakdown
    entry, spiketrace.analyze.energy.recost's) added per preset (sizes as SIZE_ROWS says), `by_trace`
    each trace's rows."""

    model: str
    frame: pd.DataFrame
    by_trace: dict[str, pd.DataFrame]
    traces: list[TraceFacts]

    def totals_by_trace(self) -> pd.DataFrame:
        """trace, preset, pj: each trace's total under each preset."""
        rows = []
        for label, frame in self.by_trace.items():
            totals = frame[frame["breakdown"].eq("total") & frame["key"].isin(TOTAL_KEYS)]
            rows += [(label, preset, pj) for preset, pj in zip(totals["preset"], totals["pj"])]
        return pd.DataFrame(rows, columns=["trace", "preset", "pj"])
