"""One-call captures of the scenarios SpikingJelly's estimators run."""

from __future__ import annotations

import copy
from contextlib import nullcontext
from typing import Any, Callable

import torch

from capture.recorder import Recorder


def call_model(model: torch.nn.Module, inputs: Any):
    """As SpikingJelly's call_model: a tuple/list is *args, a dict **kwargs, else one argument."""
    if isinstance(inputs, (tuple, list)):
        return model(*inputs)
    if isinstance(inputs, dict):
        return model(**inputs)
    return model(inputs)


def _restorer(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> Callable[[], None]:
    """A function that puts the model's parameters and buffers and the optimizer's state (its
    buffers, step counts and param_groups) back to what they are now, bit for bit."""
    tensors = [(t, t.detach().clone()) for t in (*model.parameters(), *model.buffers())]
    state = copy.deepcopy(optimizer.state_dict()) if optimizer is not None else None

    def restore() -> None:
        with torch.no_grad():
            for tensor, saved in tensors:
                tensor.copy_(saved)
        if optimizer is not None:
            optimizer.load_state_dict(state)

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


def record_inference(path, model: torch.nn.Module, inputs: Any, *, no_grad: bool = True, **settings):
    """Capture one forward pass in a `forward` stage (under torch.no_grad() by default)."""
    with Recorder(path, model=model, **settings) as recorder:
        with torch.no_grad() if no_grad else nullcontext(), recorder.stage("forward", phase="forward"):
            call_model(model, inputs)
    return path
