"""What counting returns: `CounterResult`, the counts of several counters over one trace
selection, with the ops no rule covered and SpikingJelly's shapes of the same numbers."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd


class StrictModeError(RuntimeError):
    """strict=True and some op no rule covers was met (or SpikingJelly would abort)."""


@dataclass
class CounterResult:
    """Counts of several counters over one trace selection."""

    frame: pd.DataFrame  # counter, scope, op, value (+ group columns)
    unsupported: pd.DataFrame  # counter, op, calls, tensor_bytes: ops of the counter's kind without a rule
    aborts: pd.DataFrame = field(default_factory=pd.DataFrame)  # compat: ops SpikingJelly aborts on
    selected_events: int = 0  # events of the selection no ignored module touches
    selected_bytes: int = 0  # their tensor bytes (inputs and outputs)
    # counter, op, calls, tensor_bytes: ops without a rule that the counter does not apply to
    # (a view's FLOPs, a ReLU's MACs: 0 by definition; see applicability.py)
    not_applicable: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(
        {"counter": [], "op": [], "calls": pd.Series([], dtype="int64"), "tensor_bytes": pd.Series([], dtype="int64")}))
    # extra views of some counters: counter, family, scope, metric, value (neuron_state's
    # "metrics" and "projection", SpikingJelly's get_metric_counts / get_projection_counts)
    details: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(
        {"counter": [], "family": [], "scope": [], "metric": [], "value": pd.Series([], dtype="int64")}))
    # counter, <totals_by columns>, value: each counter's Global value per group, when the
    # engine was asked for totals_by (engine.count_events); None otherwise
    group_totals: pd.DataFrame | None = None
    # the counters asked for (or implied by the default set or the convention), in that order:
    # one that counted nothing has no row in `frame` and is reported at 0 all the same
    counters: tuple[str, ...] = ()

    def coverage(self, counter: str, weight: str = "bytes") -> float:
        """Fraction of the work `counter` applies to that some rule covers: weighted by the
        ops' tensor bytes (default) or by calls; ops it does not apply to are left out of
        both sides. 1.0 when nothing applies."""
        if weight not in ("bytes", "calls"):
            raise ValueError(f"coverage weight must be 'bytes' or 'calls', got {weight!r}")
        column, total = ("tensor_bytes", self.selected_bytes) if weight == "bytes" else ("calls", self.selected_events)
        unknown = self.unsupported.loc[self.unsupported["counter"] == counter, column].sum()
        exempt = self.not_applicable.loc[self.not_applicable["counter"] == counter, column].sum()
        applicable = total - exempt
        return 1.0 if applicable <= 0 else float((applicable - unknown) / applicable)

    def totals(self) -> dict[str, int]:
        """Total per counter (its value at scope Global), 0 for a counter that counted nothing."""
        totals = {c: 0 for c in dict.fromkeys([*self.counters, *self.frame["counter"].unique()])}
        globals_ = self.frame[self.frame["scope"] == "Global"]
        totals.update({c: int(v) for c, v in globals_.groupby("counter")["value"].sum().items()})
        return totals

    def spikingjelly(self, counter: str) -> dict[str, dict[str, int]]:
        """SpikingJelly's get_counts() shape: {scope: {op: value}} (summed over any group columns)."""
        rows = self.frame[self.frame["counter"] == counter]
        summed = rows.groupby(["scope", "op"], sort=False)["value"].sum()
        result: dict[str, dict[str, int]] = {}
        for (scope, op), value in summed.items():
            result.setdefault(scope, {})[op] = int(value)
        return result

    def details_of(self, counter: str, family: str) -> dict[str, dict[str, int]]:
        """{scope: {metric: value}} of one extra view, e.g. ("neuron_state", "metrics")."""
        rows = self.details[(self.details["counter"] == counter) & (self.details["family"] == family)]
        result: dict[str, dict[str, int]] = {}
        for scope, metric, value in zip(rows["scope"], rows["metric"], rows["value"]):
            result.setdefault(scope, {})[metric] = int(value)
        return result

    def unsupported_of(self, counter: str) -> dict[str, int]:
        rows = self.unsupported[self.unsupported["counter"] == counter]
        return {op: int(n) for op, n in zip(rows["op"], rows["calls"])}

    def not_applicable_of(self, counter: str) -> dict[str, int]:
        rows = self.not_applicable[self.not_applicable["counter"] == counter]
        return {op: int(n) for op, n in zip(rows["op"], rows["calls"])}
