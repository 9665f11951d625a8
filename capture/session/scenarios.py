"""One-call captures of the scenarios SpikingJelly's estimators run."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from typing import Any

import torch

from spiketrace.capture.session.recorder import Recorder


def call_model(model: torch.nn.Module, inputs: Any):
    """As SpikingJelly's call_model: a tuple/list is *args, a dict **kwargs, else one argument."""
    if isinstance(inputs, (tuple, list)):
        return model(*inputs)
    if isinstance(inputs, dict):
        return model(**inputs)
    return model(inputs)


def _saved(value):
    return value.detach().clone() if isinstance(value, torch.Tensor) else copy.deepcopy(value)


def _restore_dict(target: dict, saved: dict, skip: tuple = ()) -> None:
    """Put `target` back to `saved` in place: the same dict, its tensors copied into (where the
    step kept their shape and dtype), keys the step added removed."""
    for key in [key for key in target if key not in saved and key not in skip]:
        del target[key]
    for key, value in saved.items():
        current = target.get(key)
        if isinstance(value, torch.Tensor) and isinstance(current, torch.Tensor) \
                and current.shape == value.shape and current.dtype == value.dtype:
            with torch.no_grad():
                current.copy_(value)
        else:
            target[key] = value


def _restorer(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> Callable[[], None]:
    """A function that puts the model's parameters and buffers and the optimizer's state (its
    buffers, step counts and param_groups) back to what they are now, bit for bit, in place:
    the parameter groups, state dicts and tensors the user holds stay the ones that drive the
    optimizer (load_state_dict would replace them with new objects)."""
    tensors = [(t, t.detach().clone()) for t in (*model.parameters(), *model.buffers())]
    groups = [] if optimizer is None else \
        [{key: _saved(value) for key, value in group.items() if key != "params"} for group in optimizer.param_groups]
    state = {} if optimizer is None else \
        {parameter: {key: _saved(value) for key, value in entry.items()} for parameter, entry in optimizer.state.items()}

    def restore() -> None:
        with torch.no_grad():
            for tensor, saved in tensors:
                tensor.copy_(saved)
        if optimizer is None:
            return
        for group, saved_group in zip(optimizer.param_groups, groups):
            _restore_dict(group, saved_group, skip=("params",))
        for parameter in [p for p in optimizer.state if p not in state]:
            del optimizer.state[parameter]  # state the step made (momentum buffers, Adam's moments)
        for parameter, saved_state in state.items():
            _restore_dict(optimizer.state[parameter], saved_state)

    return restore


def record_training_step(
    path,
    model: torch.nn.Module,
    inputs: Any,
    *,
    target: Any = None,
    loss_fn: Callable | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    suspend_loss: bool = True,
    keep_step: bool = False,
    **settings,
):
    """Capture one training step: forward stage, loss (suspended by default, as NeuroMC does),
    backward stage and optimizer stage (a real `optimizer.step()`). Returns the trace path.

    Like SpikingJelly's estimate_neuromc_runtime_energy, which never steps, it leaves the model
    and the optimizer as they were: the parameters, buffers (BatchNorm statistics) and the
    optimizer's state are restored after the step, so a second call records the same step
    (momentum buffers not yet made, the same weights). keep_step=True keeps the step (training
    as it is recorded). Gradients are cleared before and after (set to None), as SpikingJelly
    does; neuron state (membrane potentials) is the caller's, as there (reset_net between calls)."""
    if loss_fn is None or target is None:
        raise ValueError("record_training_step needs loss_fn and target")
    restore = (lambda: None) if keep_step else _restorer(model, optimizer)
    if optimizer is not None:
        optimizer.zero_grad(set_to_none=True)
    try:
        with Recorder(path, model=model, optimizer=optimizer, **settings) as recorder:
            with recorder.stage("forward", phase="forward"):
                output = call_model(model, inputs)
            with recorder.suspend() if suspend_loss else nullcontext():
                loss = loss_fn(output, target)
            with recorder.stage("backward", phase="backward"):
                loss.backward()
            if optimizer is not None:
                with recorder.stage("optimizer", phase="optimizer"):
                    optimizer.step()
                with recorder.suspend():
                    optimizer.zero_grad(set_to_none=True)
    finally:  # outside the Recorder: restoring is no part of the step
        restore()
    return path


def record_inference(path, model: torch.nn.Module, inputs: Any = None, *, batches: Iterable | None = None,
                     input_of: Callable[[Any], Any] | None = None, reset: Callable[[torch.nn.Module], Any] | None = None,
                     no_grad: bool = True, **settings):
    """Capture one forward pass of `inputs` in a `forward` stage (under torch.no_grad() by
    default); or, over a test set, one per batch of `batches` (any iterable: a DataLoader, a
    list), each its own recorder step (a `schedule=` setting may record only some).
    `input_of(batch)` picks the model's inputs from a batch (a DataLoader's (x, y): `lambda b: b[0]`);
    `reset(model)` runs before each pass, unrecorded (SpikingJelly's functional.reset_net)."""
    if (inputs is None) == (batches is None):
        raise ValueError("record_inference takes inputs (one pass) or batches (one pass each), not both or neither")
    with Recorder(path, model=model, **settings) as recorder:
        for batch in ([inputs] if batches is None else batches):
            if reset is not None:
                with recorder.suspend():
                    reset(model)
            with torch.no_grad() if no_grad else nullcontext(), recorder.stage("forward", phase="forward"):
                call_model(model, batch if input_of is None else input_of(batch))
            if batches is not None:
                recorder.step()
    return path
