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

Every hook catches its own failures and hands them to `on_failure` (capture/store/failures.py):
a module's forward and its backward always run, whatever happens to their record.

Long runs: a multi-grad hook closes a reference cycle through autograd's C++ graph (its closure
holds the grad_fn nodes it watches), so a hook left registered keeps its graph, and the
gradients it buffered, alive after the step. The tracker therefore releases its hooks:
`end_step()` removes the hooks of the step that ended once their backward ran, and hooks
still waiting one step later (outputs never backpropagated); a run that never calls
Recorder.step() has its fired hooks released whenever more than HELD_HOOKS are held.

Activation checkpointing: a module whose forward runs during backward is being recomputed
(torch.utils.checkpoint, reentrant or not). Its ops get the scopes of its original forward
call (the parents and active modules it was called under, plus itself), not the backward
state the recomputation interrupted, and the backward state is restored when it returns.
The forward-post hook is registered with `always_call`, so a recomputation that torch stops
early (non-reentrant checkpointing raises inside the forward) still leaves the module. A
non-reentrant recomputation's outputs are detached into the original graph, so no backward
hooks are registered for them (they would never fire); a reentrant one runs a backward of
its own, whose hooks are registered as in forward. How a recomputation is told apart depends
on the torch (capture/modules/recomputation.py); what an older torch's hooks cannot tell is
listed in `torch_limitations`, which the Recorder writes into the manifest.

`pause()` and `resume()` take the global module hooks out of torch and put them back
(between steps a schedule does not record), keeping the scope state.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from torch.utils._pytree import tree_flatten
from torch.utils.module_tracker import ModuleTracker

from spiketrace.capture.modules import recomputation
from spiketrace.capture.modules.grad_hooks import (
    FORWARD_HOOK_LIMITS,
    _get_grad_fn_or_grad_acc,
    deeper_recursion,
    forward_hook_options,
    grad_node,
    multi_grad_hook,
    restore_recursion,
    user_functions_off,
    will_execute,
)
from spiketrace.capture.modules.recomputation import in_backward

# A module's one input or output tensor is held by its own tensor hook, not torch's multi-grad
# hook (ScopeTracker._hold); tests turn this off to compare the two.
SINGLE_TENSOR_HOOKS = _get_grad_fn_or_grad_acc is not None and hasattr(torch._C, "_will_engine_execute_node")
# A hold on a tensor whose last hook is ours joins that hook (ScopeTracker._open_hook);
# tests turn this off to compare the two.
MERGED_HOLDS = True

# on_event(kind, module, tracker_name, tensors, kwarg_tensors, inputs_require_grad, call_index)
ModuleEventSink = Callable[[str, torch.nn.Module, str, list, list, bool, int], None]
# on_underflow(module, tracker_name); on_failure(site, what, exception)
UnderflowSink = Callable[[torch.nn.Module, str], None]
FailureSink = Callable[[str, str, BaseException], None]


def _module_name(module) -> str:
    return type(module).__qualname__


def _tensors(value) -> list[torch.Tensor]:
    """The tensors of a hook's args, output or kwargs, in tree_flatten's order."""
    # The common shapes without torch's Python pytree (three calls a module, each costly):
    # a tensor, no keywords, and a plain tuple or list of tensors and non-container leaves.
    if isinstance(value, torch.Tensor):
        return [value]
    kind = type(value)
    if kind is dict and not value:
        return []
    if (kind is tuple or kind is list) and all(isinstance(a, torch.Tensor) or a is None for a in value):
        return [a for a in value if a is not None]
    return [a for a in tree_flatten(value)[0] if isinstance(a, torch.Tensor)]


def _ignore_failure(site: str, what: str, exc: BaseException) -> None:
    pass


HELD_HOOKS = 20_000  # fired hooks are released early once a run without steps holds this many


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
        # Multi-grad hooks: [handle, fired] of this step, and those of the last step still waiting.
        self._step_hooks: list[list] = []
        self._waiting_hooks: list[list] = []
        self._steps_ended = 0  # a hook joins bodies of its own step only
        # Recomputation (module docstring): the scope each module was last called under in
        # forward, how deep the recomputation is, and the backward state it interrupted.
        self._forward_scopes: dict[torch.nn.Module, tuple[frozenset, frozenset]] = {}
        self.recompute_depth = 0
        self._interrupted: tuple[set, set] | None = None
        self._handles: tuple = ()
        self._recursion_limits = (0, 0)  # deeper_recursion()'s, while the hooks are in
        # What this torch offers (feature detection), and what the trace cannot tell without it.
        self._forward_hook_options = options = forward_hook_options(register_module_forward_hook)
        self.torch_limitations = [{"feature": f"forward hook {option}", "note": note.format(torch=torch.__version__)}
                                  for option, note in FORWARD_HOOK_LIMITS.items() if option not in options]
        not_told = recomputation.detect()
        self.torch_limitations += [{"feature": "recomputation", "note": not_told}] if not_told else []

    # -- hooks held and released ------------------------------------------------------------
    @property
    def held_hooks(self) -> int:
        return len(self._step_hooks) + len(self._waiting_hooks)

    def _hold(self, tensors: list[torch.Tensor], body: Callable[[list], None], name: str) -> None:
        entry: list = [None, False]  # [handle, fired]
        if len(tensors) == 1 and SINGLE_TENSOR_HOOKS:
            owner = self._open_hook(tensors[0]) if MERGED_HOLDS else None
            if owner is not None:
                # Our hook is the tensor's last and has not fired: this body, which its own hook
                # would have run right after that one, runs there. A layer's output is the next
                # layer's input, so most holds of a step land on a held tensor: one hook, not two.
                _, _, bundle, entry[0] = owner
                bundle.append((entry, body, name))
            else:
                entry[0] = self._hook_one(tensors[0], [(entry, body, name)])
        else:
            def grad_hook(grads) -> None:
                entry[1] = True
                try:
                    with user_functions_off():
                        body(grads)
                except Exception as exc:  # noqa: BLE001 - capture/store/failures.py
                    self.on_failure("grad_hook", name, exc)

            entry[0] = multi_grad_hook(tensors, grad_hook)
        self._step_hooks.append(entry)

    def _hook_one(self, tensor: torch.Tensor, bundle: list):
        """One tensor (most modules' input or output) held by its own hook, which runs the
        bodies of `bundle` in order: what register_multi_grad_hook does for one tensor,
        without its per-call bookkeeping, which is most of a hold's cost. A multi-grad hook of
        one tensor waits for no other; its one remaining condition, that the engine runs the
        tensor's node in this backward, is checked the same way (one C call; tests/test_scopes.py
        compares the two hooks)."""
        node = grad_node(tensor)

        def single_grad_hook(grad) -> None:
            # A leaf inside torch.autograd.grad (unknown: None) fires its hook only when its
            # gradient is captured, as one of grad's inputs: it runs.
            if will_execute(node) is not False:
                for entry, body, name in bundle:
                    entry[1] = True
                    try:
                        with user_functions_off():
                            body([grad])
                    except Exception as exc:  # noqa: BLE001 - capture/store/failures.py
                        self.on_failure("grad_hook", name, exc)

        handle = tensor.register_hook(single_grad_hook)
        single_grad_hook.spiketrace_owner = (self, self._steps_ended, bundle, handle)  # type: ignore[attr-defined]  # read by _open_hook
        return handle

    def _open_hook(self, tensor: torch.Tensor) -> tuple | None:
        """(tracker, step, bodies, handle) of our hook on `tensor` where a new body may join it:
        the hook is the last the tensor's hooks run (nothing registered since, so the order
        stays), this tracker's, of this step (end_step releases it with its step) and not fired.
        Never a leaf's: its grad accumulator is found through a view_as that each hold runs, as
        SpikingJelly's multi-grad hook does, and the trace records that op every time. Plain
        tensors only: a subclass's attributes may go through its __torch_function__."""
        if type(tensor) is not torch.Tensor or tensor.grad_fn is None:
            return None
        hooks = tensor._backward_hooks
        if not hooks:
            return None
        owner = getattr(next(reversed(hooks.values())), "spiketrace_owner", None)
        if owner is None or owner[0] is not self or owner[1] != self._steps_ended:
            return None
        return None if any(entry[1] for entry, _, _ in owner[2]) else owner

    def end_step(self) -> None:
        """Release the hooks whose backward ran, and those that waited a whole step in vain."""
        for handle, _ in self._waiting_hooks:
            handle.remove()
        waiting = []
        for entry in self._step_hooks:
            if entry[1]:
                entry[0].remove()
            else:
                waiting.append(entry)
        self._waiting_hooks, self._step_hooks = waiting, []
        self._steps_ended += 1

    def _release_fired(self) -> None:
        kept = []
        for entry in self._step_hooks:
            if entry[1]:
                entry[0].remove()
            else:
                kept.append(entry)
        self._step_hooks = kept

    def _release_all(self) -> None:
        for handle, _ in self._waiting_hooks + self._step_hooks:
            handle.remove()
        self._step_hooks, self._waiting_hooks = [], []

    # -- the scope state machine ------------------------------------------------------------------
    def _maybe_set_engine_callback(self) -> None:
        if self._has_callback:
            return

        def reset_after_backward() -> None:
            self.parents = {"Global"}
            self._has_callback = False
            self.generation += 1
            if len(self._step_hooks) > HELD_HOOKS:
                self._release_fired()

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

    def _begin_recomputation(self, module) -> None:
        """A forward during backward: swap in the scope of the module's forward call."""
        if self.recompute_depth == 0:
            self._interrupted = (self.parents, self.active_modules)
            parents, active = self._forward_scopes.get(module, (frozenset({"Global"}), frozenset()))
            self.parents, self.active_modules = set(parents), set(active)
            self.generation += 1
        self.recompute_depth += 1

    def _end_recomputation(self) -> None:
        self.recompute_depth -= 1
        if self.recompute_depth == 0 and self._interrupted is not None:
            self.parents, self.active_modules = self._interrupted
            self._interrupted = None
            self.generation += 1

    # -- global module hooks ----------------------------------------------------------------------
    def _fw_pre_hook(self, module, args) -> None:
        try:
            with user_functions_off():
                self._forward_pre(module, args)
        except Exception as exc:  # noqa: BLE001 - capture/store/failures.py
            self.on_failure("module_hook", _module_name(module), exc)

    def _fw_post_hook(self, module, args, *rest) -> None:
        # (kwargs, output) normally; (output,) when torch calls an always_call hook after the
        # forward raised (without kwargs, whatever the hook was registered with).
        kwargs, output = rest if len(rest) == 2 else ({}, rest[0] if rest else None)
        try:
            with user_functions_off():
                self._forward_post(module, kwargs, output)
        except Exception as exc:  # noqa: BLE001 - capture/store/failures.py
            self.on_failure("module_hook", _module_name(module), exc)

    def _forward_pre(self, module, args) -> None:
        name = self._get_mod_name(module)
        recomputing = in_backward()
        if recomputing:
            self._begin_recomputation(module)
        else:
            self._forward_scopes[module] = (frozenset(self.parents), frozenset(self.active_modules))
        self._enter(module, name, False)
        tensors = _tensors(args)
        grad_inputs = [t for t in tensors if t.requires_grad]
        call = self._calls.get(module, 0)
        self._calls[module] = call + 1
        self._open_calls.setdefault(module, []).append(call)
        self._inputs_require_grad.setdefault(module, []).append(bool(grad_inputs))
        self.on_event("forward_pre", module, name, tensors, [], bool(grad_inputs), call)
        if grad_inputs and not (recomputing and recomputation.in_nonreentrant_recomputation()):

            def inputs_grads_ready(grads) -> None:
                self._exit(module, name)
                self.on_event("backward_post", module, name, list(grads), [], True, call)

            self._hold(grad_inputs, inputs_grads_ready, name)

    def _forward_post(self, module, kwargs, output) -> None:
        name = self._get_mod_name(module)
        self._exit(module, name)
        pending = self._inputs_require_grad.get(module)
        inputs_require_grad = pending.pop() if pending else False
        open_calls = self._open_calls.get(module)
        call = open_calls.pop() if open_calls else max(self._calls.get(module, 1) - 1, 0)
        outputs = _tensors(output)
        try:
            self.on_event("forward_post", module, name, outputs, _tensors(kwargs), inputs_require_grad, call)
            grad_outputs = [t for t in outputs if t.requires_grad]
            if grad_outputs and not (self.recompute_depth and recomputation.in_nonreentrant_recomputation()):

                def output_grads_ready(grads) -> None:
                    self._enter(module, name, True)
                    self.on_event("backward_pre", module, name, list(grads), [], inputs_require_grad, call)
                    if not inputs_require_grad:
                        # No input grad will ever arrive; a full backward hook fires now, with
                        # grad_input None, so the backward-post event is emitted here too.
                        self.on_event("backward_post", module, name, [], [], False, call)

                self._hold(grad_outputs, output_grads_ready, name)
        finally:
            if self.recompute_depth:
                self._end_recomputation()

    # -- in and out of torch ------------------------------------------------------------------------
    def resume(self) -> None:
        """Put the global module hooks (back) into torch."""
        if not self._handles:
            self._handles = (
                register_module_forward_pre_hook(self._fw_pre_hook),
                register_module_forward_hook(self._fw_post_hook, **self._forward_hook_options),
            )
            self._recursion_limits = deeper_recursion()

    def pause(self) -> None:
        """Take the global module hooks out of torch; the scope state stays as it is."""
        for handle in self._handles:
            handle.remove()
        if self._handles:
            restore_recursion(self._recursion_limits)
        self._handles = ()

    def __enter__(self):
        self.resume()
        return self

    def __exit__(self, *args) -> None:
        self.pause()
        self._release_all()
