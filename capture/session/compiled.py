"""torch.compile under capture: detected, stated in the manifest, warned about once.

A TorchDispatchMode makes TorchDynamo skip every frame it is asked to compile (torch does not
compile under a non-infrastructure dispatch mode), so what runs, and what the trace records,
is the eager graph: the ops a compiled program would fuse or remove are all there. Dynamo also
remembers the skip: a function or module first called under capture is not compiled
afterwards, even once the recorder is closed. The user must be told both.

Seen are: a compiled module (`torch.compile(module)`'s OptimizedModule, or `module.compile()`)
in the bound model or called while the capture runs, and frames TorchDynamo was asked to
compile while the capture ran (a `torch.compile`d function). The manifest says
`"compiled": true` and lists what was seen in `compiled_seen`; the logger
`spiketrace.capture` warns once per trace (logging, not warnings: see capture/store/failures.py).
TorchDynamo is never imported here: if the user's script has not imported it, nothing was
compiled.
"""

from __future__ import annotations

import logging
import sys

logger = logging.getLogger("spiketrace.capture")

WARNING = (
    "spiketrace: %s: torch.compile was used while capturing (%s). The trace records the eager "
    "graph (TorchDynamo does not compile under a dispatch mode), and a function or module first "
    "called under capture is not compiled afterwards either; capture a separate, uncompiled run "
    "or call the compiled program once before opening the Recorder. (manifest key 'compiled')"
)


def _dynamo_frames() -> list:
    """References to the code objects TorchDynamo was asked to convert so far ([] if it was
    never imported)."""
    convert_frame = sys.modules.get("torch._dynamo.convert_frame")
    tracker = getattr(convert_frame, "input_codes", None)
    return list(getattr(tracker, "seen", ()))


def _code_name(reference) -> str:
    code = reference() if callable(reference) else reference
    name = getattr(code, "co_name", None)
    if name is None:
        return "?"
    return f"{name} ({code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno})"


def is_compiled_module(module) -> bool:
    return type(module).__name__ == "OptimizedModule" or getattr(module, "_compiled_call_impl", None) is not None


def _guarded(method):
    """A failure of the watch is the capture's (counted by `on_failure`), never the user's."""

    def guarded(self, *args):
        try:
            method(self, *args)
        except Exception as exc:  # noqa: BLE001 - capture/store/failures.py
            self.on_failure("compile", method.__name__, exc)

    return guarded


class CompileWatch:
    """Collects what was compiled into the manifest (`compiled`, `compiled_seen`)."""

    def __init__(self, manifest: dict, trace_path: str, on_failure) -> None:
        self.manifest = manifest
        self.trace_path = trace_path
        self.on_failure = on_failure
        manifest["compiled"] = False
        manifest["compiled_seen"] = []
        self._frames_before = 0
        self._modules: set[int] = set()
        self.frames_from_now()

    @_guarded
    def module(self, module, name: str) -> None:
        if id(module) not in self._modules and is_compiled_module(module):
            self._modules.add(id(module))
            inner = getattr(module, "_orig_mod", None)
            what = f"compiled module {name}" + (f" (of {type(inner).__name__})" if inner is not None else "")
            self._seen(what)

    @_guarded
    def model(self, model) -> None:
        for name, module in model.named_modules():
            self.module(module, name or type(model).__name__)

    @_guarded
    def frames_from_now(self) -> None:
        """The capture goes into torch: count frames given to TorchDynamo from here."""
        self._frames_before = len(_dynamo_frames())

    @_guarded
    def frames(self) -> None:
        """Frames TorchDynamo was asked to compile since the capture last went into torch."""
        frames = _dynamo_frames()
        if len(frames) > self._frames_before:
            new = frames[self._frames_before:]
            self._frames_before = len(frames)
            names = ", ".join(sorted({_code_name(reference) for reference in new[:3]}))
            self._seen(f"{len(new)} frames given to TorchDynamo, e.g. {names}")

    def _seen(self, what: str) -> None:
        seen = self.manifest["compiled_seen"]
        if not seen:
            logger.warning(WARNING, self.trace_path, what)
        self.manifest["compiled"] = True
        if len(seen) < 20:
            seen.append(what)
