"""TorchDynamo's frame switches, as this torch has them.

The recording handler keeps Dynamo out of its own frames by itself rather than through torch's
per-call wrapper (RecordingMode._should_skip_dynamo): its code is marked skip once, so Dynamo is
never handed the handler's own frame (which starts while the eval-frame callback is still on),
and it turns the callback off while it runs (`set_eval_frame(None)`, which returns the callback
to put back), so no frame it calls is handed to Dynamo either.

Both switches live in torch's C module, `torch._C._dynamo.eval_frame`, reached by attribute
(torch 2.4's `torch._C._dynamo` is no package to import from); using them imports no
torch._dynamo. Marking a code skip has two spellings, each used where this torch has it
(feature detection, best first):

- `set_code_exec_strategy(code, _FrameExecStrategy(SKIP, DEFAULT))`, in newer torch;
- `skip_code(code)`, the older spelling (torch 2.4 and 2.6 have only it), with the same
  meaning: this frame is skipped, the frames it calls are not.

Where neither works, `set_eval_frame` and `skip_code` are None and RecordingMode keeps torch's
wrapper. torch 2.4 to 2.7 wrap no mode's handler, so without these switches nothing would keep
Dynamo out there.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def _skip_by_strategy(eval_frame) -> Callable | None:
    make_strategy = getattr(eval_frame, "_FrameExecStrategy", None)
    actions = getattr(eval_frame, "_FrameAction", None)
    set_strategy = getattr(eval_frame, "set_code_exec_strategy", None)
    if make_strategy is None or actions is None or set_strategy is None:
        return None
    skip_this_frame_only = make_strategy(actions.SKIP, actions.DEFAULT)

    def skip_code(code) -> None:
        set_strategy(code, skip_this_frame_only)

    return skip_code


def _skip_by_skip_code(eval_frame) -> Callable | None:
    return getattr(eval_frame, "skip_code", None)


SKIP_SPELLINGS = (_skip_by_strategy, _skip_by_skip_code)


def frame_switches() -> tuple[Callable | None, Callable | None]:
    """(set_eval_frame, skip_code) of this torch, each tried once as the handler uses it, or
    (None, None) where torch lacks one or they do not work."""
    eval_frame = getattr(getattr(torch._C, "_dynamo", None), "eval_frame", None)
    set_eval_frame = getattr(eval_frame, "set_eval_frame", None)
    if set_eval_frame is None:
        return None, None
    for spelling in SKIP_SPELLINGS:
        try:
            skip_code = spelling(eval_frame)
            if skip_code is None:
                continue
            skip_code((lambda: None).__code__)
            set_eval_frame(set_eval_frame(None))
            return set_eval_frame, skip_code
        except Exception:  # noqa: BLE001 - a torch whose switches differ: the next spelling, or torch's wrapper
            continue
    return None, None


set_eval_frame, skip_code = frame_switches()
