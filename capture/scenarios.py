"""One-call captures of the scenarios SpikingJelly's estimators run."""

from __future__ import annotations

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


def record_training_step(
    path,
    model: torch.nn.Module,
    inputs: Any,
    *,
    target: Any = None,
    loss_fn: Callable | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    suspend_loss: bool = True,
    **settings,
):
    """Capture one training step: forward stage, loss (suspended by default, as NeuroMC does),
    backward stage and optimizer stage (a real `optimizer.step()`). Returns the trace path."""
    if loss_fn is None or target is None:
        raise ValueError("record_training_step needs loss_fn and target")
    if optimizer is not None:
        optimizer.zero_grad(set_to_none=True)
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
    return path


def record_inference(path, model: torch.nn.Module, inputs: Any, *, no_grad: bool = True, **settings):
    """Capture one forward pass in a `forward` stage (under torch.no_grad() by default)."""
    with Recorder(path, model=model, **settings) as recorder:
        with torch.no_grad() if no_grad else nullcontext(), recorder.stage("forward", phase="forward"):
            call_model(model, inputs)
    return path
