"""Which steps a Recorder records: `schedule(...)`, with torch.profiler.schedule's arguments.

    rec = Recorder("trace/", model=net, schedule=schedule(skip_first=10, wait=5, warmup=1, active=3, repeat=2),
                   on_trace_ready=lambda path: print("cycle written to", path))

Each step (Recorder.step() ends one) gets one action, as torch.profiler's do:

- `none`: nothing of the capture is in torch: no dispatch mode, no module hooks, so the step
  costs what a plain step costs (skip_first, wait, and every step after the last cycle);
- `warmup`: the capture machinery runs (dispatch mode, module hooks and scope tracking) but
  nothing is written, like the profiler's warm-up steps;
- `record`: the step is recorded;
- `record_and_save`: the last recorded step of a cycle; when it ends, what the cycle buffered
  is flushed to the trace and `on_trace_ready(path)` is called.

The Recorder also takes torch.profiler.schedule(...) itself (its ProfilerAction values), or
any callable `step -> bool` (True records the step; a cycle then ends where a run of recorded
steps ends).
"""

from __future__ import annotations

from collections.abc import Callable

NONE, WARMUP, RECORD, RECORD_AND_SAVE = "none", "warmup", "record", "record_and_save"
RECORDED = (RECORD, RECORD_AND_SAVE)
_PROFILER_ACTIONS = {"NONE": NONE, "WARMUP": WARMUP, "RECORD": RECORD, "RECORD_AND_SAVE": RECORD_AND_SAVE}


class Schedule:
    """A step schedule; call it with a step index for whether that step is recorded, or ask
    `action(step)` for its action (module docstring)."""

    def __init__(self, *, wait: int, warmup: int, active: int, repeat: int, skip_first: int, skip_first_wait: int):
        if min(wait, warmup, repeat, skip_first, skip_first_wait) < 0 or active < 1:
            raise ValueError("schedule: wait, warmup, repeat, skip_first and skip_first_wait must be >= 0 and active >= 1")
        self.wait, self.warmup, self.active, self.repeat = wait, warmup, active, repeat
        self.skip_first, self.skip_first_wait = skip_first, skip_first_wait
        self.description = {"skip_first": skip_first, "skip_first_wait": skip_first_wait, "wait": wait,
                            "warmup": warmup, "active": active, "repeat": repeat}

    def action(self, step: int) -> str:
        """As torch.profiler.schedule: after `skip_first` steps, cycles of `wait` + `warmup` +
        `active` steps (`repeat` cycles, 0 = forever); `skip_first_wait` skips the first wait."""
        if step < self.skip_first:
            return NONE
        step -= self.skip_first
        if self.skip_first_wait:
            step += self.wait
        length = self.wait + self.warmup + self.active
        if self.repeat > 0 and step // length >= self.repeat:
            return NONE
        position = step % length
        if position < self.wait:
            return NONE
        if position < self.wait + self.warmup:
            return WARMUP
        return RECORD if position < length - 1 else RECORD_AND_SAVE

    def __call__(self, step: int) -> bool:
        return self.action(step) in RECORDED

    def __repr__(self) -> str:
        return "schedule(" + ", ".join(f"{k}={v}" for k, v in self.description.items()) + ")"


def schedule(
    *, wait: int = 0, warmup: int = 0, active: int = 1, repeat: int = 0, skip_first: int = 0, skip_first_wait: int = 0,
) -> Schedule:
    """Which steps to record, with torch.profiler.schedule's arguments and meaning: skip
    `skip_first` steps, then cycles of `wait` steps left alone, `warmup` steps where the capture
    runs without writing, and `active` recorded steps; `repeat` cycles (0 = until the end).
    Returns a Schedule: `rule(step)` is True for a recorded step, `rule.action(step)` the action."""
    return Schedule(wait=wait, warmup=warmup, active=active, repeat=repeat, skip_first=skip_first,
                    skip_first_wait=skip_first_wait)


def step_action(rule: Callable | None, step: int) -> str:
    """The action of `step` under any schedule the Recorder accepts (None records every step)."""
    if rule is None:
        return RECORD
    action = getattr(rule, "action", None)
    if action is not None:
        return action(step)
    value = rule(step)
    name = getattr(value, "name", None)  # torch.profiler.ProfilerAction
    if name in _PROFILER_ACTIONS:
        return _PROFILER_ACTIONS[name]
    return RECORD if value else NONE


def describe(rule: Callable | None):
    """The schedule as the manifest's settings hold it."""
    if rule is None:
        return None
    return getattr(rule, "description", None) or repr(rule)
