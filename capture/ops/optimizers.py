"""Optimizer steps: one `optimizer_steps` row per parameter per step() call.

Taken in `register_step_pre_hook`, i.e. before the update, which is when SpikingJelly's
NeuroMC profiler looks at the optimizer (`record_optimizer_step`): a momentum buffer exists
from the second step on, and the analysis must know whether it did at this step.

A step given a closure (Lightning's automatic optimization, LBFGS) runs the forward and the
backward inside step(), after the pre-hook: its rows are taken when the closure first returns,
when the gradients the update reads exist (as after a hand-written loop's backward). The hook
hands step() a closure that calls the user's and then takes the rows; its result is the user's.
"""

from __future__ import annotations

import json

import torch

from spiketrace.capture.context import RecordingContext
from spiketrace.capture.store.table_buffer import TableBuffer
from spiketrace.capture.tensors.nested import sizes
from spiketrace.capture.tensors.registry import excluded_from_modes


def _hyperparameters(group: dict) -> str:
    options = {}
    for key, value in group.items():
        if key == "params":
            continue
        if isinstance(value, torch.Tensor):
            value = value.item() if value.numel() == 1 else value.tolist()
        options[key] = value
    return json.dumps(options, default=repr, sort_keys=True)


class OptimizerLog:
    def __init__(self, context: RecordingContext, rows: TableBuffer, parameter_names: dict[int, str]) -> None:
        self.context = context
        self.rows = rows
        self.parameter_names = parameter_names
        self.handles: list = []
        self.optimizers: list[torch.optim.Optimizer] = []
        self.calls: dict[int, int] = {}

    def bind(self, optimizer: torch.optim.Optimizer) -> None:
        index = len(self.optimizers)
        self.optimizers.append(optimizer)
        self.handles.append(optimizer.register_step_pre_hook(
            lambda opt, args, kwargs: self._before_step(index, opt, args, kwargs)))

    def _before_step(self, index: int, optimizer: torch.optim.Optimizer, args: tuple, kwargs: dict):
        closure = kwargs.get("closure", args[0] if args else None)
        if not callable(closure):
            self._record(index, optimizer)
            return None
        taken = False

        def closure_then_record():
            nonlocal taken
            result = closure()
            if not taken:
                taken = True
                self._record(index, optimizer)
            return result

        if "closure" in kwargs:
            return args, {**kwargs, "closure": closure_then_record}
        return (closure_then_record, *args[1:]), kwargs

    def unbind(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()

    def _owner(self, name: str | None) -> int | None:
        if name is None:
            return None
        return self.context.catalog.static_paths.get(name.rsplit(".", 1)[0])

    def _record(self, index: int, optimizer: torch.optim.Optimizer) -> None:
        context = self.context
        call = self.calls.get(index, 0)
        self.calls[index] = call + 1
        if not context.recording:
            return
        with context.lock:
            # A hook failure must not stop optimizer.step() (capture/store/failures.py).
            try:
                self._write_rows(context.take_seq(), index, call, optimizer)
            except Exception as exc:  # noqa: BLE001 - capture/store/failures.py
                context.report_failure("optimizer_hook", type(optimizer).__qualname__, exc, context.seq - 1)

    def _write_rows(self, seq: int, index: int, call: int, optimizer: torch.optim.Optimizer) -> None:
        rows = []
        for group_index, group in enumerate(optimizer.param_groups):
            hyperparameters = _hyperparameters(group)
            for param_index, p in enumerate(group["params"]):
                name = self.parameter_names.get(id(p))
                with excluded_from_modes():  # a nested parameter's sizes are read from its offsets
                    shape, numel = sizes(p)
                rows.append(dict(
                    seq=seq,
                    step=self.context.step_index,
                    optimizer_index=index,
                    call_index=call,
                    optimizer_class=type(optimizer).__qualname__,
                    group_index=group_index,
                    hyperparameters=hyperparameters,
                    param_index=param_index,
                    parameter=name,
                    module_id=self._owner(name),
                    shape=shape,  # a tuple: the row's parameter group is interned (table_buffer)
                    ndim=p.ndim,
                    numel=numel,
                    dtype=str(p.dtype).removeprefix("torch."),
                    has_grad=p.grad is not None,
                    state_keys=tuple(sorted(str(k) for k in optimizer.state.get(p, {}))),
                ))
        for row in rows:  # all of the call's rows or none
            self.rows.append(**row)
