"""One `module_events` row per module hook the tracker reports (ScopeTracker): forward
pre and post, backward pre and post, with the tensor ids of the tensors it saw.

A hook writes its row straight into the buffer's columns, its repeating fields as one interned
tuple (BUFFER_GROUPS "$hook"), as the op log does for ops: TableBuffer.append's keyword
dict and per-field grouping would be a large share of a hook's record.
"""

from __future__ import annotations

import torch

from spiketrace.capture.context import RecordingContext
from spiketrace.capture.store.table_buffer import INTERNED_PER_GROUP
from spiketrace.capture.tensors.registry import excluded_from_modes
from spiketrace.schemas.statistics_levels import SYNAPTIC_LEVEL_HOOKS

# The buffer's physical columns in the order write() fills them, and the members of the
# interned $hook tuple in its order (checked against the buffer when the log is made).
_COLUMNS = ("seq", "call_index", "step", "stage_id", "inputs", "outputs", "kwarg_inputs", "$hook")
_HOOK = ("kind", "module_id", "tracker_name", "stage", "phase", "grad_enabled", "training", "thread",
         "inputs_require_grad", "recompute")
# Which of the ids a hook saw are its inputs, outputs and keyword inputs.
_INPUT_KINDS = frozenset({"forward_pre", "backward_post"})
_OUTPUT_KINDS = frozenset({"forward_post", "backward_pre"})


class ModuleEventLog:
    """Writes the module_events rows (and a stateful module's memories after its forward)."""

    def __init__(self, context: RecordingContext) -> None:
        self.context = context
        buffer = context.writer.tables["module_events"]
        if set(buffer.columns) != set(_COLUMNS) or buffer.groups.get("$hook") != _HOOK:
            raise AssertionError("spiketrace.capture.modules.module_events column lists are out of step with "
                                 "the module_events buffer")
        # bound appends, kept for the buffer's life (a flush drops written rows in place)
        self._appends = tuple(buffer.columns[name].append for name in _COLUMNS)
        self._interned = buffer._interned["$hook"]
        # The op log's compiled record, which writes a hook of plain tensors too
        # (capture/native/record/hooks.c); None where the op log has none. Set by the Recorder.
        self.native = None

    def write(self, kind, module, tracker_name, tensors, kwarg_tensors, inputs_require_grad, call_index: int) -> None:
        context = self.context
        module_id = context.catalog.module_id(module, tracker_name=tracker_name)
        if not context.recording:
            return
        native = self.native
        if native is not None:
            seq = native.module_event(kind, module, module_id, tracker_name, tensors, kwarg_tensors,
                                      inputs_require_grad, call_index, kind in SYNAPTIC_LEVEL_HOOKS, self._appends,
                                      self._interned)
            if seq >= 0:
                if kind == "forward_post" and module_id in context.catalog.stateful:
                    context.snapshot(seq, module_id, module)
                return
        with excluded_from_modes():
            seq = context.take_seq()
            context.current_record = tracker_name
            describe = context.registry.describe
            wanted = kind in SYNAPTIC_LEVEL_HOOKS  # layer inputs and outputs
            # tuples: no spare capacity kept per buffered row, as a list would
            ids = tuple([None if t is None else describe(t, seq, wanted=wanted) for t in tensors])
            kwarg_ids = tuple([describe(t, seq, wanted=wanted) for t in kwarg_tensors])
            stage = context.current_stage
            hook = (kind, module_id, tracker_name, "unlabeled" if stage is None else stage.name,
                    None if stage is None else stage.phase, torch.is_grad_enabled(), module.training,
                    context.thread_index(), inputs_require_grad,
                    kind.startswith("forward") and context.tracker.recompute_depth > 0)
            interned = self._interned
            hook = interned.setdefault(hook, hook)
            if len(interned) > INTERNED_PER_GROUP:
                interned.clear()
            # Everything is computed above, so these appends cannot stop halfway.
            a = self._appends
            a[0](seq)
            a[1](call_index)
            a[2](context.step_index)
            a[3](None if stage is None else stage.stage_id)
            a[4](ids if kind in _INPUT_KINDS else None)
            a[5](ids if kind in _OUTPUT_KINDS else None)
            a[6](kwarg_ids if kind == "forward_post" else None)
            a[7](hook)
            if kind == "forward_post" and module_id in context.catalog.stateful:
                context.snapshot(seq, module_id, module)
