"""`LoopRecorder`: a Recorder driven by a training framework's hooks instead of the user's code.

A framework (Lightning, the Hugging Face Trainer) owns the loop, so the places where a
hand-written script opens `rec.stage(...)` and calls `rec.step()` are its hooks. The callbacks
(spiketrace.capture.lightning, spiketrace.capture.huggingface) translate their hooks into the
few calls here:

    begin_run(kind, root, model, optimizers)   fit / validate / test: one trace each, <root>/<kind>
    begin_step(kind, index, **facts)           a batch starts: train, validation, test, evaluate
    enter(stage, phase)                        the work from here on belongs to this stage
    pause()                                    the work from here on is the framework's own
    end_step()                                 the batch is over
    end_run(failed)                            the trace is closed

Between stages (`pause`) nothing is recorded: the framework's bookkeeping (progress bars,
metric aggregation, its loggers) is not the model's work and would differ from a
hand-written loop's.

Which steps are recorded: each kind of step has its own schedule (spiketrace.capture.schedule),
counted over that kind's own steps, so validation batches do not shift the training schedule.
The Recorder's own step advances once per batch of any kind; the framework's numbers of each
recorded step (global step, epoch, batch index) go to the manifest's `step_facts`, and the
logged scalars are placed at the framework's global step.

The Recorder opens at the first step that is not left alone, so a run whose schedule records
nothing writes nothing, and `rec.step()` is called when the next batch begins (the
framework tells only then what kind of batch comes next) or when the run ends.

A failure of this machinery is a capture failure: it is reported once (warnings) and recorded
in the manifest's `degraded` list where a trace is open, never raised into the training.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterable

import torch

from spiketrace.capture.live.analysis import LiveAnalysis
from spiketrace.capture.session.recorder import Recorder
from spiketrace.capture.session.schedules import NONE, RECORDED, step_action

log = logging.getLogger("spiketrace")


class _NextAction:
    """The Recorder's schedule: the action the loop decided for the step about to begin."""

    def __init__(self, description: dict) -> None:
        self.next = NONE
        self.description = description

    def action(self, step: int) -> str:
        return self.next

    def __call__(self, step: int) -> bool:
        return self.next in RECORDED


class LoopRecorder:
    """One framework callback's recordings (module docstring). `schedules` maps a kind of
    step to its schedule (None: every step of that kind; a kind not in it is never recorded).
    `live`: builds the LiveAnalysis of a trace (None: no scalars logged). `recorder_options`:
    the Recorder's keyword arguments (value_statistics, ...)."""

    def __init__(self, schedules: dict[str, Callable | None], *, framework: str,
                 live: Callable[[], LiveAnalysis | None] | None = None, recorder_options: dict | None = None,
                 metadata: dict | None = None) -> None:
        self.schedules = schedules
        self.framework = framework
        self.make_live = live
        self.recorder_options = dict(recorder_options or {})
        self.metadata = dict(metadata or {})
        self.traces: list[str] = []  # every trace directory this loop opened, in order
        self.recorder: Recorder | None = None
        self.live: LiveAnalysis | None = None
        self._run: tuple | None = None  # (kind, path, model, optimizers) of the run in progress
        self._rule = _NextAction({kind: _describe(rule) for kind, rule in schedules.items()})
        self._stage: contextlib.ExitStack | None = None
        self._counts: dict[str, int] = {}  # steps of each kind seen in this run
        self._runs: dict[str, int] = {}  # runs of each kind begun (their traces' names)
        self._unreported: dict[int, int | tuple[int, str]] = {}  # recorded step -> (framework step, kind)
        self._step_open = False
        self._warned: set[str] = set()

    # -- runs ------------------------------------------------------------------------------
    def begin_run(self, kind: str, root: str, model: torch.nn.Module | None,
                  optimizers: Iterable | Callable[[], Iterable] = ()) -> None:
        """A fit / validate / test begins; its trace is `<root>/<kind>` (`-1`, `-2` for the
        kind's later runs), opened at its first recorded step. `optimizers`, or a function
        returning them when the trace opens (a framework may make them after the run began)."""
        self._guard(self._end_run_now, "end_run", False)  # a run the framework never ended
        count = self._runs.get(kind, 0)
        self._runs[kind] = count + 1
        path = os.path.join(os.fspath(root), kind if count == 0 else f"{kind}-{count}")
        self._run = (kind, path, model, optimizers)
        self._counts = {}
        # The worker process starts with the run, before its steps: its start-up (a Python that
        # imports the analysis) is not paid inside a recorded step. No scalars if it cannot be
        # set up; the recording goes on.
        if self.make_live is not None:
            self.live = self._guard(self.make_live, "live_analysis")
            if self.live is not None:
                self._guard(self.live.start, "live_analysis")

    def end_run(self, failed: bool = False) -> None:
        """The run ends: the last step is closed, its cycle analysed, the trace closed."""
        self._guard(self._end_run_now, "end_run", failed)

    @property
    def running(self) -> bool:
        return self._run is not None

    # -- steps -----------------------------------------------------------------------------
    def begin_step(self, kind: str, **facts) -> str:
        """A batch of `kind` begins; returns its action (none, warmup, record, record_and_save).
        `facts`: the framework's numbers of it (global_step is where its scalars are logged)."""
        return self._guard(self._begin_step, "begin_step", kind, facts) or NONE

    def enter(self, stage: str, phase: str) -> None:
        """From here on the work is stage `stage` (of `phase`), until the next enter/pause/end_step."""
        self._guard(self._enter, "enter", stage, phase)

    def pause(self) -> None:
        """From here on the work is the framework's own: not recorded."""
        self._guard(self._enter, "pause", None, None)

    def end_step(self) -> None:
        self._guard(self._enter, "end_step", None, None)
        self._step_open = False

    @property
    def recording_step(self) -> bool:
        """The step in progress is recorded or warmed up (its stages matter)."""
        return self._step_open and self._rule.next != NONE

    def poll(self) -> None:
        """Hand the scalars the analysis finished to the sinks of the training process."""
        if self.live is not None:
            self._guard(self.live.poll, "poll")

    # -- the work --------------------------------------------------------------------------
    def _begin_step(self, kind: str, facts: dict) -> str:
        if self._run is None:
            return NONE
        self._close_stage()  # the pause between batches: Recorder.step() is not taken inside a stage
        index = self._counts.get(kind, 0)
        self._counts[kind] = index + 1
        action = step_action(self.schedules[kind], index) if kind in self.schedules else NONE
        self._rule.next = action
        recorder = self.recorder
        if recorder is None:
            if action == NONE:
                return action
            recorder = self._open()
        else:
            recorder.step()  # ends the previous batch's step; the new one takes `action`
        self._step_open = True
        if action in RECORDED:
            step = recorder.step_index
            entry = {"step": step, "kind": kind, "index": index, **facts}
            recorder.writer.manifest.setdefault("step_facts", []).append(entry)
            self._unreported[step] = (int(facts.get("global_step", step)), kind)
        self._enter(None, None)
        self.poll()
        return action

    def _open(self) -> Recorder:
        assert self._run is not None
        kind, path, model, given = self._run
        optimizers = [o for o in (given() if callable(given) else given) if isinstance(o, torch.optim.Optimizer)]
        if path in self.traces:
            raise ValueError(f"{path}: this loop already wrote a trace there")
        recorder = Recorder(path, model=model, optimizer=optimizers, schedule=self._rule,
                            on_trace_ready=self._cycle_ready, metadata={**self.metadata, "loop": kind},
                            **self.recorder_options)
        recorder.__enter__()
        self.recorder = recorder
        self.traces.append(path)
        recorder.writer.manifest["loop"] = {"framework": self.framework, "run": kind,
                                            "schedules": self._rule.description}
        return recorder

    def _close_stage(self) -> None:
        if self._stage is not None:
            stack, self._stage = self._stage, None
            stack.close()

    def _enter(self, stage: str | None, phase: str | None) -> None:
        """Close the stage (or pause) open now; open `stage`, or a pause when None. After a
        batch ends the pause stays open until the next begins: the framework's work between
        batches is not recorded either."""
        self._close_stage()
        recorder = self.recorder
        if recorder is None or not recorder.active or self._rule.next == NONE:
            return
        stack = contextlib.ExitStack()
        stack.enter_context(recorder.stage(stage, phase=phase) if stage else recorder.suspend())
        self._stage = stack

    def _cycle_ready(self, path: str) -> None:
        """The Recorder flushed a cycle: its recorded steps go to the analysis."""
        steps, self._unreported = self._unreported, {}
        if self.live is not None and steps and self.recorder is not None:
            self.live.submit(path, self.recorder.rank, steps)

    def _end_run_now(self, failed: bool) -> None:
        if self._run is None:
            return
        self._run = None
        recorder = self.recorder
        if recorder is None and self.live is not None:  # nothing was recorded: no scalars to wait for
            live, self.live = self.live, None
            live.close()
        try:
            self._close_stage()
            self._step_open = False
        finally:
            try:
                if recorder is not None:
                    self._close(recorder, failed)
            finally:
                self.recorder = None

    def _close(self, recorder: Recorder, failed: bool) -> None:
        try:
            if not failed and recorder.active:
                self._rule.next = NONE
                recorder.step()  # the last batch's cycle is flushed and analysed while the trace is open
            live, self.live = self.live, None
            if live is not None:
                live.close()  # waits (bounded) for the analysis, hands the last scalars over
                recorder.writer.manifest["loop"]["live_analysis"] = live.summary()
        finally:
            error = RuntimeError(f"the {self.framework} run failed") if failed else None
            recorder.__exit__(type(error) if error else None, error, None)

    def _guard(self, call, site: str, *args):
        """Run `call`; a failure is the capture's own: warned once, recorded, never raised."""
        try:
            return call(*args)
        except Exception as exc:  # noqa: BLE001 - a capture failure never reaches the training loop
            if self.recorder is not None and self.recorder.active:
                self.recorder.writer.failures.report(f"loop.{site}", self.framework, exc)
            if site not in self._warned:
                self._warned.add(site)
                log.warning("spiketrace: the %s callback's %s failed and was skipped: %s: %s",
                            self.framework, site, type(exc).__name__, exc)
            return None


def _describe(rule) -> object:
    return None if rule is None else getattr(rule, "description", None) or repr(rule)
