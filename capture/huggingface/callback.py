"""The Hugging Face callback: `Trainer(..., callbacks=[SpiketraceCallback("runs/traces")])`.

The Trainer's events mark a step (an optimizer step, with its gradient-accumulation
micro-batches) and its optimizer update; it has none between a micro-batch's forward and
backward, so the model's own call marks them, seen by a global module hook while a recorded
step runs (the outermost module call is the model's forward, the loss computed inside it):

    the model's call begins        -> forward
    the model's call returns       -> backward  (the loss scaling, backward, and at the last
                                                 micro-batch the Trainer's gradient clipping,
                                                 which it runs before on_pre_optimizer_step)
    on_substep_end                 -> pause     (a micro-batch that does not step)
    on_pre_optimizer_step          -> optimizer
    on_optimizer_step              -> pause     (the scheduler, zero_grad, logging)
    on_step_end                    -> the step ends

With `inference=True` the evaluation's batches are recorded too (stage `evaluate`, phase
forward; one step per batch, ended by on_prediction_step): inside train() into its trace,
a standalone evaluate() into a trace of its own. The global hooks are then in torch from the
Trainer's creation until `close()` (each module call pays one Python call); otherwise only
during recorded steps, so a step the schedule leaves alone costs what a plain step costs.

Scalars go to the sinks the Trainer's `report_to` names: tensorboard (event files of a run
`<output_dir>/runs/spiketrace`, beside the Trainer's own, or TENSORBOARD_LOGGING_DIR), mlflow
(the Trainer's active run, written by the analysis worker) and wandb (the Trainer's run, against train/global_step); others
are warned about once. Traces go to `<path>/train`, `<path>/evaluate` (default path:
`<output_dir>/spiketrace`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable

import torch
from transformers import TrainerCallback

from spiketrace.capture.live.analysis import LiveAnalysis
from spiketrace.capture.live.loop import LoopRecorder
from spiketrace.capture.live.sinks import MlflowSink, TensorBoardSink
from spiketrace.capture.session.schedules import schedule as make_schedule

log = logging.getLogger("spiketrace")

DEFAULT_SCHEDULE = make_schedule(skip_first=1, wait=9, active=1, repeat=5, skip_first_wait=1)


class SpiketraceCallback(TrainerCallback):
    """Records the training steps `schedule` picks (and evaluation batches when `inference`)
    and logs each recorded step's scalars to the Trainer's `report_to` sinks and `sinks`.
    Arguments as spiketrace.capture.lightning.SpiketraceCallback's."""

    def __init__(self, path: str | os.PathLike | None = None, *, schedule: Callable | None = DEFAULT_SCHEDULE,
                 inference: bool = False, inference_schedule: Callable | None = None, log: bool = True,
                 sinks: Iterable = (), energy: Iterable[tuple] | None = None, counters: list[str] | None = None,
                 max_pending: int = 4, recorder_options: dict | None = None) -> None:
        self.path = None if path is None else os.fspath(path)
        schedules: dict[str, Callable | None] = {"train": schedule}
        if inference:
            schedules["evaluate"] = inference_schedule
        self.inference = inference
        self.log_scalars = log
        self.live_options = {"sinks": list(sinks), "energy": energy, "counters": counters, "max_pending": max_pending}
        self.loop = LoopRecorder(schedules, framework="huggingface", live=self._make_live,
                                 recorder_options=recorder_options)
        self._args = None
        self._model: torch.nn.Module | None = None
        self._run_kind: str | None = None
        self._in_train_step = False
        self._depth = 0  # module calls in progress (the outermost one is the model's)
        self._hooks: list = []
        self._state = None

    @property
    def traces(self) -> list[str]:
        return list(self.loop.traces)

    # -- runs --------------------------------------------------------------------------------------
    def on_init_end(self, args, state, control, model=None, **kwargs):
        self._args, self._state = args, state
        self._model = model if model is not None else self._model
        if self.inference:  # a standalone evaluate() has no event before its first batch
            self._install()

    def _begin(self, kind: str, args, state, model, optimizer=None) -> None:
        self._args, self._state = args, state
        self._model = model if model is not None else self._model
        root = self.path or os.path.join(args.output_dir, "spiketrace")
        optimizers = [getattr(optimizer, "optimizer", optimizer)] if optimizer is not None else []
        self.loop.begin_run(kind, root, self._model, optimizers)
        self._run_kind = kind
        if self.inference:
            self._install()

    def _end(self) -> None:
        if not self.inference:
            self._remove()
        self._run_kind = None
        self.loop.end_run()

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        self._begin("train", args, state, model, optimizer)

    def on_train_end(self, args, state, control, **kwargs):
        self._end()

    # -- training steps ------------------------------------------------------------------------------
    def on_step_begin(self, args, state, control, **kwargs):
        self._state = state
        self._depth = 0  # a module call that raised last step never returned
        self.loop.begin_step("train", global_step=state.global_step, epoch=state.epoch)
        self._in_train_step = True
        if self.loop.recording_step:
            self._install()

    def on_substep_end(self, args, state, control, **kwargs):
        self.loop.pause()

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.loop.enter("optimizer", "optimizer")

    def on_optimizer_step(self, args, state, control, **kwargs):
        self.loop.pause()

    def on_step_end(self, args, state, control, **kwargs):
        self.loop.end_step()
        self._in_train_step = False
        if not self.inference:
            self._remove()

    # -- evaluation batches ------------------------------------------------------------------------
    def on_prediction_step(self, args, state, control, **kwargs):
        if not self._in_train_step:
            self.loop.end_step()

    def on_evaluate(self, args, state, control, **kwargs):
        if self._run_kind == "evaluate":
            self._end()

    def on_predict(self, args, state, control, metrics=None, **kwargs):
        self.on_evaluate(args, state, control, **kwargs)

    def close(self) -> None:
        """Take the global module hooks out of torch (inference=True keeps them in from the
        Trainer's creation on, for a later evaluate()) and end a run still open."""
        self._remove()
        if self.loop.running:
            self._end()

    # -- the model's calls ---------------------------------------------------------------------------
    def _install(self) -> None:
        if not self._hooks:
            self._hooks = [torch.nn.modules.module.register_module_forward_pre_hook(self._before_call),
                           torch.nn.modules.module.register_module_forward_hook(self._after_call)]
            self._depth = 0

    def _remove(self) -> None:
        for handle in self._hooks:
            handle.remove()
        self._hooks = []

    def _before_call(self, module, args) -> None:
        self._depth += 1
        if self._depth != 1:
            return
        if self._in_train_step:
            self.loop.enter("forward", "forward")
        elif self.inference and not module.training:
            if not self.loop.running and self._args is not None:
                self._begin("evaluate", self._args, self._state, self._model)
            state = self._state
            self.loop.begin_step("evaluate", global_step=getattr(state, "global_step", 0))
            self.loop.enter("evaluate", "forward")

    def _after_call(self, module, args, output) -> None:
        self._depth = max(self._depth - 1, 0)
        if self._depth != 0:
            return
        if self._in_train_step:
            self.loop.enter("backward", "backward")
        elif self.inference and not module.training:
            self.loop.pause()

    # -- scalars -------------------------------------------------------------------------------------
    def _make_live(self) -> LiveAnalysis | None:
        args = self._args
        if not self.log_scalars or args is None or not getattr(self._state, "is_world_process_zero", True):
            return None
        sinks, deliver = list(self.live_options["sinks"]), {}
        for name in args.report_to or ():
            if name == "tensorboard":
                sinks.append(TensorBoardSink(os.environ.get("TENSORBOARD_LOGGING_DIR")
                                             or os.path.join(args.output_dir, "runs", "spiketrace")))
            elif name == "mlflow":
                # the Trainer's run, written by the worker: the Trainer ends it at on_train_end,
                # before the last cycle's scalars arrive
                sinks.append(_trainer_mlflow_run())
            elif name in _IN_PROCESS:
                deliver[f"report_to {name}"] = _IN_PROCESS[name]
            else:
                log.warning("spiketrace: no sink for report_to %r; its scalars are not logged there", name)
        options = self.live_options
        return LiveAnalysis(sinks, deliver=deliver, energy=options["energy"], counters=options["counters"],
                            max_pending=options["max_pending"])


def _trainer_mlflow_run() -> MlflowSink:
    import mlflow

    run = mlflow.active_run()
    if run is None:
        raise RuntimeError("report_to mlflow, but the Trainer has no active MLflow run")
    experiment = mlflow.get_experiment(run.info.experiment_id).name
    return MlflowSink(mlflow.get_tracking_uri(), experiment=experiment, run_id=run.info.run_id)


def _to_wandb(step: int, scalars: dict) -> None:
    import wandb

    if wandb.run is None:
        raise RuntimeError("no active W&B run")
    wandb.run.log({**scalars, "train/global_step": step})  # the Trainer's step metric


_IN_PROCESS: dict[str, Callable[[int, dict], None]] = {"wandb": _to_wandb}
