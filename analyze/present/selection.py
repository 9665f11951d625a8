"""Which part of a trace a command looks at: `--stage --phase --step --rank --module`, the
same five filters on every command that reads a trace.

    from spiketrace.analyze.present.selection import Selection
    selection = Selection(phase="backward", rank=0)
    selection.check(trace)                          # SelectionError naming the values the trace has
    count(trace, **selection.counts_options())      # the counters filter events themselves
    energy(trace, "neuromc", **selection.energy_options(trace))   # stage, step, rank
    with selection.views(trace):                    # every view (events, stages, module_ops, ...)
        trace.sql("SELECT count(*) FROM events")    # shows only the selected rows

Each analysis gets the selection in the form it takes:

- the counters (`counts`, and the counts of report, diff, roofline) filter events by all five;
- the energy models select by stage, step and rank (a value or a list each), so a phase is
  the stages of that phase (every stage has one, from its name or `phase=`); they cannot cost
  part of a stage's work by module (a mapping spans the modules a fragment touches), so
  `--module` is refused where energy is computed (SelectionError; `--by module` shows each
  module's energy instead);
- queries over the views (`info`, `sql`, `collectives`, spike rates) see the views restricted
  (spiketrace.analyze.trace.views.selected_views).

A filter value the trace does not hold is an error naming the values it does hold (a typo
must not read as "no work"); values that exist but exclude each other select nothing.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, fields

from spiketrace.analyze.trace.views import selected_views, sql_string

FILTERS = ("stage", "phase", "step", "rank", "module")
SHOWN_VALUES = 12  # known values listed in an error


class SelectionError(ValueError):
    """A filter the trace cannot satisfy, or an analysis cannot apply (one line for the user)."""


@dataclass(frozen=True)
class Selection:
    """The filters of one command; None: not filtered on that."""

    stage: str | None = None
    phase: str | None = None
    step: int | None = None
    rank: int | None = None
    module: str | None = None

    def __bool__(self) -> bool:
        return any(getattr(self, name) is not None for name in FILTERS)

    def as_dict(self) -> dict:
        """The filters given, in FILTERS order (the `selection` entry of JSON documents)."""
        return {name: getattr(self, name) for name in FILTERS if getattr(self, name) is not None}

    def describe(self) -> str:
        """'phase backward, rank 0', or 'the whole trace'."""
        return ", ".join(f"{k} {v}" for k, v in self.as_dict().items()) or "the whole trace"

    def counts_options(self) -> dict:
        """The keyword arguments of spiketrace.analyze.counters.count (and Analysis.counts)."""
        return self.as_dict()

    def check(self, *traces) -> None:
        """SelectionError when a filter's value occurs in none of `traces`, naming the values
        they hold."""
        for name, value in self.as_dict().items():
            if name == "module" and value == "Global":
                continue
            if not any(_holds(trace, name, value) for trace in traces):
                known = sorted({v for trace in traces for v in _values(trace, name)}, key=_natural)
                listed = ", ".join(map(str, known[:SHOWN_VALUES])) + (" ..." if len(known) > SHOWN_VALUES else "")
                where = "the trace has" if len(traces) == 1 else "the traces have"
                raise SelectionError(f"--{name} {value}: no such {name} in {_names(traces)}; "
                                     f"{where} {listed or f'no {name} at all'}")

    def energy_options(self, *traces) -> dict:
        """The keyword arguments of an energy model (stage, step, rank) for `traces`: a phase
        becomes the list of its stages. SelectionError for --module, and for a phase that is
        not one stage's whole work."""
        if self.module is not None and self.module != "Global":
            raise SelectionError(f"--module {self.module}: the energy models cost whole stages, not one module's "
                                 "work; see each module's energy with --by module (energy) or the report's layers, "
                                 "or count a module's operations with `spiketrace counts --module`")
        options = {name: getattr(self, name) for name in ("stage", "step", "rank") if getattr(self, name) is not None}
        if self.phase is None:
            return options
        stages: dict[str, set] = {}
        for trace in traces:
            for name, phase in trace.con.execute("SELECT DISTINCT name, phase FROM stages").fetchall():
                stages.setdefault(name, set()).add(phase)
        chosen = sorted(name for name, phases in stages.items() if self.phase in phases)
        mixed = [name for name in chosen if len(stages[name]) > 1]
        if mixed:
            raise SelectionError(f"--phase {self.phase}: stage {mixed[0]} runs in phases "
                                 f"{', '.join(sorted(map(str, stages[mixed[0]])))}; an energy model selects whole "
                                 "stages, so select it by --stage")
        if self.stage is not None:
            if self.stage not in chosen:
                raise SelectionError(f"--stage {self.stage} is not of --phase {self.phase} "
                                     f"(the stages of that phase: {', '.join(chosen) or 'none'})")
            return options
        if not chosen:
            raise SelectionError(f"--phase {self.phase}: no stage of that phase in {_names(traces)}")
        return options | {"stage": chosen}

    @contextlib.contextmanager
    def views(self, trace):
        """Within the block the trace's views show only the selected rows."""
        with selected_views(trace.con, **self.as_dict()):
            yield


def selection_of(value) -> Selection:
    """A Selection from a Selection, a mapping of filters or None (no filter)."""
    if value is None:
        return Selection()
    if isinstance(value, Selection):
        return value
    unknown = set(value) - {f.name for f in fields(Selection)}
    if unknown:
        raise SelectionError(f"unknown filter(s) {sorted(unknown)}; choose from {FILTERS}")
    return Selection(**value)


# -- what a trace holds ----------------------------------------------------------------------

_QUERIES = {  # filter -> (does the trace hold value {v}?, the values it holds)
    name: (f"SELECT 1 FROM events WHERE {name} = {{v}} LIMIT 1",
           f"SELECT DISTINCT {name} FROM events WHERE {name} IS NOT NULL")
    for name in ("stage", "phase", "step")
} | {"module": ("SELECT 1 FROM scopes WHERE list_contains(parents, {v}) LIMIT 1",
                "SELECT DISTINCT p FROM scopes, UNNEST(parents) AS u(p)")}


def _literal(value) -> str:
    return sql_string(value) if isinstance(value, str) else str(int(value))


def _holds(trace, name: str, value) -> bool:
    if name == "rank":
        return int(value) in trace.ranks
    return bool(trace.con.execute(_QUERIES[name][0].format(v=_literal(value))).fetchall())


def _values(trace, name: str) -> list:
    if name == "rank":
        return list(trace.ranks)
    return [row[0] for row in trace.con.execute(_QUERIES[name][1]).fetchall()]


def _natural(value) -> tuple:
    return (0, value, "") if isinstance(value, int) else (1, 0, str(value))


def _names(traces) -> str:
    return str(traces[0].path) if len(traces) == 1 else f"any of the {len(traces)} traces"
