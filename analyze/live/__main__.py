"""`python -m spiketrace.analyze.live --config JSON`: the live analysis worker.

It reads one request per line on stdin, {"id", "trace", "rank", "steps": {"<recorder step>":
<logged step>}, "kinds": {"<recorder step>": kind} (optional)}, analyses each step of the
trace as it stands (a trace still being written is read as the snapshot of its committed
flushes), writes the rows to its sinks and answers one line on stdout: {"id", "rows":
[{"step", "recorder_step", "scalars", "skipped"}], "sink_failures", "error"}. "steps": null
asks for every step of the trace this worker has not answered yet, each logged at its own
number; a kind other than "train" puts its steps' scalars under <prefix>/<kind>/. A request
that fails is answered with its error and the worker goes on; at the end of stdin it closes
the sinks and exits 0. The protocol: docs/live_analysis.md.

stdout carries the answers and nothing else: the worker keeps its own copy of stdout for them
and points file descriptor 1 at stderr, so whatever a logger library (or a process it starts)
prints goes there. Notes of the worker's own (a trace's warnings, a sink that failed at close)
go to stderr once each.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from spiketrace.analyze.live.scalars import ConfigError, ScalarConfig, one_line, reason, step_scalars
from spiketrace.analyze.live.sinks import Sinks
from spiketrace.analyze.present.health import health_lines
from spiketrace.analyze.results import Analysis
from spiketrace.analyze.trace.reader import UNFINISHED

NOTE_PREFIX = "spiketrace live: "


class RequestError(ValueError):
    """A request line the worker cannot read (one line naming the key)."""


class Notes:
    """Lines for stderr, each said once for the worker's life (a warning repeated every step is noise)."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.said: set[str] = set()

    def say(self, line: str) -> None:
        if line not in self.said:
            self.said.add(line)
            print(NOTE_PREFIX + line, file=self.stream, flush=True)


def read_config(text: str) -> tuple[ScalarConfig, list]:
    """The scalar settings and the sink specs of --config's JSON object; ConfigError naming the key."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as problem:
        raise ConfigError(f"config: not JSON ({problem})") from None
    if not isinstance(document, dict):
        raise ConfigError(f"config: expected a JSON object, got {type(document).__name__}")
    specs = document.pop("sinks", None)
    specs = [] if specs is None else specs
    if not isinstance(specs, list):
        raise ConfigError(f"config: sinks must be a list of sink specs, got {specs!r}")
    return ScalarConfig.from_json(document), specs


@dataclass(frozen=True)
class Request:
    """One request: the trace, the rank (None: all ranks added up), {recorder step: logged step}
    (None: every step of the trace this worker has not analysed yet, logged at its own number),
    and {recorder step: kind} for steps that are not training steps."""

    trace: str
    rank: int | None
    steps: dict[int, int] | None
    kinds: dict[int, str]


def read_request(document: Any) -> Request:
    """The request of a request line's JSON object; RequestError naming the key."""
    if not isinstance(document, Mapping):
        raise RequestError(f"a request is a JSON object, got {type(document).__name__}")
    trace, rank, steps = document.get("trace"), document.get("rank"), document.get("steps")
    if not isinstance(trace, str) or not trace:
        raise RequestError(f"trace must be a trace directory's path, got {trace!r}")
    if rank is not None and (not isinstance(rank, int) or isinstance(rank, bool) or rank < 0):
        raise RequestError(f"rank must be a rank number or null, got {rank!r}")
    if steps is not None and not isinstance(steps, Mapping):
        raise RequestError(f"steps must be an object {{\"<recorder step>\": <logged step>}} or null, got {steps!r}")
    kinds = document.get("kinds") or {}
    if not isinstance(kinds, Mapping) or not all(isinstance(kind, str) and kind.strip("/") for kind in kinds.values()):
        raise RequestError(f"kinds must be an object {{\"<recorder step>\": \"<kind>\"}}, got {kinds!r}")
    for key, logged in (steps or {}).items():
        if not isinstance(logged, int) or isinstance(logged, bool):
            raise RequestError(f"steps: {key}: the logged step must be a whole number, got {logged!r}")
    return Request(trace, rank, None if steps is None else {_step_number("steps", k): v for k, v in steps.items()},
                   {_step_number("kinds", k): kind.strip("/") for k, kind in kinds.items()})


def _step_number(key: str, text) -> int:
    if not str(text).isdigit():
        raise RequestError(f"{key}: {text!r} is not a recorder step number")
    return int(text)


class Worker:
    """Answers requests with the scalars of their steps, written to the sinks as they are computed."""

    def __init__(self, config: ScalarConfig, sinks: Sinks, notes: Notes) -> None:
        self.config, self.sinks, self.notes = config, sinks, notes
        self.analysed: dict[tuple[str, int | None], set[int]] = {}  # (trace, rank) -> recorder steps answered

    def answer(self, line: str) -> dict:
        """The answer to one request line. Never raises for the request's sake."""
        request_id, trace = None, ""
        try:
            try:
                document = json.loads(line)
            except json.JSONDecodeError as problem:
                raise RequestError(f"request is not JSON ({problem})") from None
            request_id = document.get("id") if isinstance(document, Mapping) else None
            request = read_request(document)
            trace = request.trace
            rows = self.analyse(request)
        except Exception as problem:  # noqa: BLE001 - one bad request (a missing trace, an unknown step) must not end the worker
            error = reason(problem)
            if trace and trace not in error:
                error = f"{trace}: {error}"
            return {"id": request_id, "rows": [], "sink_failures": self.sinks.write([]), "error": error}
        written = [{key: row[key] for key in ("step", "recorder_step", "scalars")} for row in rows]
        return {"id": request_id, "rows": rows, "sink_failures": self.sinks.write(written), "error": None}

    def analyse(self, request: Request) -> list[dict]:
        """The rows of one request, in the order they are logged (by logged step): the trace is
        opened anew (it has grown since the last request) and each step analysed with the step filter."""
        rows: list[dict[str, Any]] = []
        done = self.analysed.setdefault((str(Path(request.trace).resolve()), request.rank), set())
        # one DuckDB thread: the worker shares the machine with the training it watches
        with warnings.catch_warnings(record=True) as caught, Analysis(request.trace, verify=False,
                                                                      threads=1) as analysis:
            warnings.simplefilter("always")
            trace = analysis.trace
            # a trace still being written is what the worker is for: that warning is no news
            said = [w for w in trace.warnings if not w.endswith(UNFINISHED)]
            for line in [*health_lines(trace.health()), *(f"warning: {w}" for w in said)]:
                self.notes.say(f"{request.trace}: {line}")
            steps = request.steps
            if steps is None:
                steps = {step: step for step in recorded_steps(trace, request.rank) if step not in done}
            for recorder_step, logged in sorted(steps.items(), key=lambda item: (item[1], item[0])):
                kind = request.kinds.get(recorder_step, "train")
                config = self.config if kind == "train" else replace(self.config, prefix=f"{self.config.prefix}/{kind}")
                scalars = step_scalars(analysis, recorder_step, request.rank, config)
                rows.append({"step": logged, "recorder_step": recorder_step, "scalars": dict(scalars),
                             "skipped": scalars.skipped})
        for warning in caught:
            self.notes.say(f"{request.trace}: warning: {warning.message}")
        done.update(row["recorder_step"] for row in rows)
        return rows


def recorded_steps(trace, rank: int | None) -> list[int]:
    """The recorder steps the trace holds (of rank `rank`, or any), in order."""
    where = "" if rank is None else f" AND rank = {int(rank)}"
    return [int(row[0]) for row in trace.con.execute(
        f"SELECT DISTINCT step FROM events WHERE step IS NOT NULL{where} ORDER BY step").fetchall()]


def answer_stream() -> IO[str]:
    """A stream for the answers alone: a copy of stdout, fd 1 then pointed at stderr (module docstring)."""
    sys.stdout.flush()
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    return answers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spiketrace.analyze.live",
                                     description="Analyse recorded steps of a trace as they are sent (one JSON "
                                                 "request per line on stdin) and log their scalars; "
                                                 "docs/live_analysis.md.")
    parser.add_argument("--config", default="{}", metavar="JSON",
                        help="counters, energy, spike_rates, coverage, prefix and sinks, as a JSON object")
    arguments = parser.parse_args(argv)
    try:
        config, specs = read_config(arguments.config)
    except ConfigError as problem:
        print(f"error: {one_line(problem)}", file=sys.stderr)
        return 2
    answers, notes = answer_stream(), Notes(sys.stderr)
    sinks = Sinks(specs)
    worker = Worker(config, sinks, notes)
    try:
        for line in iter(sys.stdin.readline, ""):
            if line.strip():
                answers.write(json.dumps(worker.answer(line), allow_nan=False) + "\n")
                answers.flush()
    finally:
        for failure in sinks.close():  # no answer is left to carry them
            notes.say(f"sink {failure['sink']} failed at close: {failure['error']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
