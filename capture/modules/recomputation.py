"""Whether an op or module call during backward is activation checkpointing's recomputation.

torch.utils.checkpoint recomputes a checkpointed forward during backward in one of two ways.
A reentrant checkpoint runs it inside its own autograd node, CheckpointFunctionBackward, which
torch names (`torch._C._current_autograd_node`, in every torch capture supports). A
non-reentrant one runs it from a saved tensor's unpack hook, under saved-tensor hooks of its
own (`_recomputation_hook`), and how that is told depends on what the torch offers. The tests,
best first, each used where its torch has what it reads (feature detection, never a version
compare):

- `saved_tensors_hooks_stack`: the top of autograd's saved-tensor hooks stack
  (`torch._C._autograd._top_saved_tensors_default_hooks`) is the recomputation's;
- `checkpoint_frames`: for a torch without that reader (2.4 to 2.6), a frame of the function
  the unpack hook runs the recomputation in (`recompute_fn`, defined inside a function of
  torch.utils.checkpoint) is on the calling thread's stack. It is there exactly while the
  recomputation's hooks are pushed (the unpack hook pushes them around that one call), so
  both tests flag the same ops (tests/test_older_torch.py); it costs a walk up the Python
  stack per op dispatched during backward, where the first test costs one call;
- neither: a non-reentrant recomputation is not told apart. Its ops and module calls are
  recorded as backward work (`recompute` false), and the tracker holds gradient hooks on the
  recomputed module calls' inputs, which are the original graph's tensors, so their backward
  events repeat. `detect()` returns the note the manifest then carries (`torch_limitations`).

`detect()` picks the test when a Recorder opens (the module's `in_nonreentrant_recomputation`),
so a test that takes a torch API away sees the fallback a torch without it gets.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from types import FrameType

import torch
import torch.utils.checkpoint


def in_backward() -> bool:
    return torch._C._current_graph_task_id() != -1


def _top_hooks_test() -> Callable[[], bool] | None:
    top_hooks = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)
    if top_hooks is None:
        return None

    def top_hooks_are_recomputations() -> bool:
        hooks = top_hooks(True)
        return hooks is not None and getattr(hooks[0], "__qualname__", "").startswith("_recomputation_hook")

    return top_hooks_are_recomputations


@functools.cache
def _nested_codes(module, name: str) -> frozenset:
    """The code objects of the functions called `name` defined inside the functions of `module`
    (recompute_fn's: torch 2.14 moved it into _checkpoint_without_reentrant_generator_impl)."""
    found, pending = set(), [f.__code__ for f in vars(module).values() if hasattr(f, "__code__")]
    while pending:
        for constant in pending.pop().co_consts:
            if hasattr(constant, "co_consts"):  # a nested function's code
                if constant.co_name == name:
                    found.add(constant)
                pending.append(constant)
    return frozenset(found)


def _frames_test() -> Callable[[], bool] | None:
    recompute_codes = _nested_codes(torch.utils.checkpoint, "recompute_fn")
    if not recompute_codes:
        return None
    current_frame = sys._getframe

    def recompute_frame_on_stack() -> bool:
        frame: FrameType | None = current_frame(1)
        while frame is not None:
            if frame.f_code in recompute_codes:
                return True
            frame = frame.f_back
        return False

    return recompute_frame_on_stack


def _never() -> bool:
    return False


# (name, maker): a maker returns the test where this torch has what it reads, else None.
RECOMPUTATION_TESTS: tuple[tuple[str, Callable[[], Callable[[], bool] | None]], ...] = (
    ("saved_tensors_hooks_stack", _top_hooks_test),
    ("checkpoint_frames", _frames_test),
)
NOT_TOLD = ("torch.utils.checkpoint's non-reentrant recomputation is not told apart from backward work on torch "
            "{torch}: its ops and module calls have recompute false, and the backward events of the modules it "
            "recomputes repeat (this torch has neither torch._C._autograd._top_saved_tensors_default_hooks nor "
            "the recompute_fn spiketrace looks for)")

# torch.utils.checkpoint (use_reentrant=False) is recomputing: set by detect(), read per op.
in_nonreentrant_recomputation: Callable[[], bool] = _never
method = "none"  # the name of the test in use


def detect() -> str | None:
    """Use the best test this torch allows, tried once as the record calls it (a test that
    raised would drop every op of a backward); the manifest's note where none applies."""
    global in_nonreentrant_recomputation, method
    for name, make in RECOMPUTATION_TESTS:
        try:
            test = make()
            if test is None:
                continue
            test()
        except Exception:  # noqa: BLE001 - a torch whose API differs: the next test
            continue
        in_nonreentrant_recomputation, method = test, name
        return None
    in_nonreentrant_recomputation, method = _never, "none"
    return NOT_TOLD.format(torch=torch.__version__)


detect()


def in_recomputation(grad_enabled: bool) -> bool:
    """An op dispatched during backward belongs to a checkpoint recomputation: a non-reentrant
    one's (its own bookkeeping detaches included), or one inside a reentrant one's
    CheckpointFunctionBackward with grad enabled (its nested backward runs with grad disabled
    and is real backward work)."""
    if in_nonreentrant_recomputation():
        return True
    if not grad_enabled:
        return False
    node = torch._C._current_autograd_node()
    return node is not None and type(node).__name__ == "CheckpointFunctionBackward"
