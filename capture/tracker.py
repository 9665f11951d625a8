"""Module scopes exactly as SpikingJelly 2.0.0's ActiveModuleTracker has them, plus hook events.

SpikingJelly attributes every op to the names in `tracker.parents` and checks its ignore
lists against `tracker.active_modules`. To replay its numbers offline we keep the same state
machine, quirks included: names depend on call order; backward scopes come from autograd
multi-grad hooks; the end-of-backward callback resets `parents` but not `active_modules`, so
modules whose inputs did not require grad stay "active" after backward (spec section 1.6).

One quirk is not re-enacted: SpikingJelly raises `RuntimeError("active_modules stack
underflow")` when a module exits while `active_modules` is empty, which aborts the user's
backward. It happens with a loss module (`nn.CrossEntropyLoss()`): autograd never calls the
grad hook on the loss itself (the root of backward), so the loss module is never re-entered,
but its inputs' grad hook still exits it. We keep SpikingJelly's state (the name leaves
`parents`; `active_modules` stays empty) and report the underflow to `on_underflow`, so the
trace can say where SpikingJelly would have stopped.

The same hooks report module events (forward pre/post, backward pre/post) to the recorder.
Backward events come from grad hooks rather than `register_full_backward_hook`, because full
backward hooks wrap inputs and outputs in extra `aten.view` ops and so change the very op
stream being recorded.

Every hook catches its own failures and hands them to `on_failure` (capture/failures.py):
a module's forward and its backward always run, whatever happens to their record.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch.autograd.graph import register_multi_grad_hook
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from torch.utils._pytree import tree_flatten
from torch.utils.module_tracker import ModuleTracker

# on_event(kind, module, tracker_name, tensors, kwarg_tensors, inputs_require_grad, call_index)
ModuleEventSink = Callable[[str, torch.nn.Module, str, list, list, bool, int], None]
# on_underflow(module, tracker_name); on_failure(site, what, exception)
UnderflowSink = Callable[[torch.nn.Module, str], None]
FailureSink = Callable[[str, str, BaseException], None]


def _module_name(module) -> str:
    return type(module).__qualname__


def _tensors(value) -> list[torch.Tensor]:
    return [a for a in tree_flatten(value)[0] if isinstance(a, torch.Tensor)]


def _ignore_failure(site: str, what: str, exc: BaseException) -> None:
    pass


class ScopeTracker(ModuleTracker):
    def __init__(
        self,
        on_event: ModuleEventSink,
        on_underflow: UnderflowSink | None = None,
        on_failure: FailureSink = _ignore_failure,
    ) -> None:
        super().__init__()
        self.active_modules: set[torch.nn.Module] = set()
        self.on_event = on_event
        self.on_underflow = on_underflow
        self.on_failure = on_failure
        # Bumped on every change of parents/active_modules, so the recorder can intern the
        # (parents, active_modules) state once per change instead of once per op.
        self.generation = 0
        # Per module, a stack of "did the inputs of this forward call require grad?".
        self._inputs_require_grad: dict[torch.nn.Module, list[bool]] = {}
        # forward calls per module, and the indexes of calls still open (recursion nests them):
        # backward events carry the index of the forward call whose graph they belong to
        self._calls: dict[torch.nn.Module, int] = {}
        self._open_calls: dict[torch.nn.Module, list[int]] = {}

    def _maybe_set_engine_callback(self) -> None:
        if self._has_callback:
            return

        def reset_after_backward() -> None:
            self.parents = {"Global"}
            self._has_callback = False
            self.generation += 1

        torch.autograd.Variable._execution_engine.queue_callback(reset_after_backward)
        self._has_callback = True

    def _enter(self, module, name: str, is_backward: bool) -> None:
        if is_backward:
            self._maybe_set_engine_callback()
        self.parents.add(name)
        self.active_modules.add(module)
        self.generation += 1

    def _exit(self, module, name: str) -> None:
        self.parents.discard(name)
        if not self.active_modules:
            # SpikingJelly raises "active_modules stack underflow" here (module docstring).
            if self.on_underflow is not None:
                self.on_underflow(module, name)
        else:
            self.active_modules.discard(module)
        self.generation += 1

    def _fw_pre_hook(self, module, args) -> None:
        try:
            self._forward_pre(module, args)
        except Exception as exc:  # noqa: BLE001 - capture/failures.py
            self.on_failure("module_hook", _module_name(module), exc)

    def _fw_post_hook(self, module, args, kwargs, output) -> None:
        try:
            self._forward_post(module, kwargs, output)
        except Exception as exc:  # noqa: BLE001 - capture/failures.py
            self.on_failure("module_hook", _module_name(module), exc)

    def _guarded_grad_hook(self, body: Callable[[list], None], name: str) -> Callable:
        def grad_hook(grads) -> None:
            try:
                body(grads)
            except Exception as exc:  # noqa: BLE001 - capture/failures.py
                self.on_failure("grad_hook", name, exc)

        return grad_hook

    def _forward_pre(self, module, args) -> None:
        name = self._get_mod_name(module)
        self._enter(module, name, False)
        tensors = _tensors(args)
        grad_inputs = [t for t in tensors if t.requires_grad]
        call = self._calls.get(module, 0)
        self._calls[module] = call + 1
        self._open_calls.setdefault(module, []).append(call)
        self._inputs_require_grad.setdefault(module, []).append(bool(grad_inputs))
        self.on_event("forward_pre", module, name, tensors, [], bool(grad_inputs), call)
        if grad_inputs:

            def inputs_grads_ready(grads) -> None:
                self._exit(module, name)
                self.on_event("backward_post", module, name, list(grads), [], True, call)

            self._hooks.append(
                register_multi_grad_hook(grad_inputs, self._guarded_grad_hook(inputs_grads_ready, name))
            )

    def _forward_post(self, module, kwargs, output) -> None:
        name = self._get_mod_name(module)
        self._exit(module, name)
        pending = self._inputs_require_grad.get(module)
        inputs_require_grad = pending.pop() if pending else False
        open_calls = self._open_calls.get(module)
        call = open_calls.pop() if open_calls else max(self._calls.get(module, 1) - 1, 0)
        outputs = _tensors(output)
        self.on_event("forward_post", module, name, outputs, _tensors(kwargs), inputs_require_grad, call)
        grad_outputs = [t for t in outputs if t.requires_grad]
        if grad_outputs:

            def output_grads_ready(grads) -> None:
                self._enter(module, name, True)
                self.on_event("backward_pre", module, name, list(grads), [], inputs_require_grad, call)
                if not inputs_require_grad:
                    # No input grad will ever arrive; a full backward hook fires now, with
                    # grad_input None, so the backward-post event is emitted here too.
                    self.on_event("backward_post", module, name, [], [], False, call)

            self._hooks.append(
                register_multi_grad_hook(grad_outputs, self._guarded_grad_hook(output_grads_ready, name))
            )

    def __enter__(self):
        self._fw_pre_handle = register_module_forward_pre_hook(self._fw_pre_hook)
        self._fw_post_handle = register_module_forward_hook(self._fw_post_hook, with_kwargs=True)
        return self
