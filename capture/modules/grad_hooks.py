"""Gradient hooks, call depth and forward hook options for the module tracker (ScopeTracker).

`multi_grad_hook` is torch's register_multi_grad_hook ("all" mode) that never raises into the
user's torch.autograd.grad; `will_execute` asks the engine whether a node runs, answering None
where torch's own check would raise. `deeper_recursion` makes room for the frame torch's hooked
module call adds a nesting level. `user_functions_off` keeps a tensor subclass's
__torch_function__ (a user's logging or tracking subclass) from seeing the capture's own
attribute reads and hook registrations, so its log is the plain run's. `forward_hook_options`
says which options of the global forward hook this torch takes.
"""

from __future__ import annotations

import inspect
import sys
import threading
from collections.abc import Callable

import torch

try:  # the node a tensor's grad goes through (private to torch; register_multi_grad_hook's own)
    from torch.autograd.graph import _get_grad_fn_or_grad_acc
except ImportError:  # a torch without it: every node counts as run
    _get_grad_fn_or_grad_acc = None  # type: ignore[assignment]  # the optional import's fallback

# Inside it a subclass's attribute reads and methods skip its __torch_function__; the ops the
# capture runs still reach the dispatch modes (they are recorded as SpikingJelly records them).
user_functions_off = torch._C.DisableTorchFunctionSubclass


# With any global module hook in torch, a module call takes torch's hooked path: four Python
# frames a nesting level instead of three. A model nested as deep as the plain run allows
# would then raise RecursionError under capture; while the hooks are in, the recursion limit
# grows by that third, plus room for the hooks' own frames at the deepest call.
HOOKED_FRAMES, PLAIN_FRAMES, HOOK_FRAMES = 4, 3, 100


def deeper_recursion() -> tuple[int, int]:
    """Raise the recursion limit for the hooked path; (the limit before, the limit set)."""
    before = sys.getrecursionlimit()
    deeper = before * HOOKED_FRAMES // PLAIN_FRAMES + HOOK_FRAMES
    sys.setrecursionlimit(deeper)
    return before, deeper


def restore_recursion(limits: tuple[int, int]) -> None:
    """Put the limit back, unless the user changed it meanwhile (theirs then stays)."""
    before, deeper = limits
    if sys.getrecursionlimit() == deeper:
        sys.setrecursionlimit(before)



def grad_node(t: torch.Tensor):
    """The node `t`'s gradient goes through, None where it cannot be had: a torch without
    _get_grad_fn_or_grad_acc, or a leaf strided nested tensor, which refuses the view torch
    takes to reach a leaf's gradient accumulator (its module's backward_post was lost)."""
    if _get_grad_fn_or_grad_acc is None:
        return None
    try:
        return _get_grad_fn_or_grad_acc(t)
    except RuntimeError:
        return None


def will_execute(node) -> bool | None:
    """Whether autograd's engine runs `node` in the current backward; None where it cannot
    say: no node known (grad_node), or a leaf's gradient accumulator inside
    torch.autograd.grad (which never runs it, but captures the leaf's gradient when the leaf is
    one of grad's inputs), where torch's own check raises ("A leaf node was passed to
    _will_engine_execute_node") and, inside a hook, would abort the user's gradient penalty or
    saliency map."""
    if node is None:
        return None
    try:
        return torch._C._will_engine_execute_node(node)
    except RuntimeError:
        return None


class _Handles:
    """The handles of one multi-tensor hold, removed together."""

    __slots__ = ("handles",)

    def __init__(self, handles) -> None:
        self.handles = handles

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def multi_grad_hook(tensors: list[torch.Tensor], fn: Callable[[list], None]) -> _Handles:
    """torch.autograd.graph.register_multi_grad_hook(tensors, fn) in its "all" mode: fn(grads)
    once per backward, when every tensor whose node the engine runs has its gradient. One
    difference: a leaf inside torch.autograd.grad, whose node the engine cannot be asked about
    (will_execute is None), is not waited for, and fn runs once the nodes that do run
    reported, or at the first gradient if none is known to run; it never runs twice in one
    backward. torch's own raises there, into the user's autograd.grad."""
    nodes = [grad_node(t) for t in tensors]
    tasks: dict[int, list] = {}  # graph task id -> [gradients seen, gradients expected, gradients]
    lock = threading.Lock()

    def hook_of(index: int):
        def inner_hook(grad) -> None:
            task = torch._C._current_graph_task_id()
            with lock:
                state = tasks.get(task)
                if state is None:
                    expected = sum(1 for node in nodes if node is None or will_execute(node))
                    state = tasks[task] = [0, max(expected, 1), [None] * len(tensors)]
                grads = state[2]
                if grads is None:  # fn ran in this backward already
                    return
                grads[index] = grad
                state[0] += 1
                ready = state[0] == state[1]
                if ready:
                    state[2] = None
            if ready:
                fn(grads)

        return inner_hook

    return _Handles(tuple(t.register_hook(hook_of(i)) for i, t in enumerate(tensors)))


# The global forward hook's options, and what the trace cannot tell where a torch's hook lacks
# one (torch 2.4's has no with_kwargs: _fw_post_hook then gets no kwargs, as on always_call).
FORWARD_HOOK_LIMITS = {
    "with_kwargs": ("module calls' keyword tensor inputs are not recorded on torch {torch} "
                    "(module_events.kwarg_inputs is empty): its global forward hook takes no with_kwargs"),
    "always_call": ("a module forward that raises (checkpointing's early stop among them) does not leave the "
                    "module's scope on torch {torch}: its global forward hook takes no always_call"),
}


def forward_hook_options(register: Callable) -> dict[str, bool]:
    """The FORWARD_HOOK_LIMITS options `register` (register_module_forward_hook) takes, all on."""
    try:
        accepted = set(inspect.signature(register).parameters)
    except (TypeError, ValueError):  # a signature Python cannot read: the plain hook
        accepted = set()
    return {option: True for option in FORWARD_HOOK_LIMITS if option in accepted}
