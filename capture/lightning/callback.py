"""The Lightning callback: `Trainer(callbacks=[SpiketraceCallback("runs/traces")])`.

Lightning's hooks say where each stage of a training batch begins and ends, so no user code
marks them:

    on_train_batch_start       -> forward     (training_step, the loss included)
    on_before_backward         -> backward
    on_after_backward          -> pause       (manual optimization: forward, the user's code)
    on_before_optimizer_step   -> optimizer   (gradient clipping and the update)
    the optimizer's step ends  -> pause       (manual optimization: forward)
    on_train_batch_end         -> the step ends

A step is one training batch (`training_step` call); with gradient accumulation the batches
that do not step the optimizer have no optimizer stage, as in a hand-written loop. A closure
optimizer (Lightning's automatic optimization) is taken when its closure returns
(capture/ops/optimizers.py), so the optimizer rows see the gradients. Validation and test
batches are recorded as inference (a stage named `validation` / `test`, phase forward) when
`inference=True`; the sanity check never is. `precision="bf16-mixed"` records the bf16 ops
autocast runs, as a hand-written loop under torch.autocast does.

Each `fit`, `validate` and `test` writes one trace, `<path>/fit`, `<path>/validate`, ...
(`-1`, `-2` for a second call); by default `path` is `<trainer.log_dir>/spiketrace`. Under DDP
every rank records into the same trace directory (one shard per rank) and rank 0 logs the
scalars of its own rank to the trainer's loggers, as Lightning's loggers log on rank 0 only.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

import torch

try:  # the unified package; pytorch_lightning (the standalone one) has the same hooks
    from lightning.pytorch import Callback
except ImportError:  # pragma: no cover - only where the unified package is absent
    from pytorch_lightning import Callback  # type: ignore[assignment]  # the standalone twin: the same hooks

from spiketrace.capture.live.analysis import LiveAnalysis
from spiketrace.capture.live.loop import LoopRecorder
from spiketrace.capture.session.schedules import schedule as make_schedule

# A few steps by default: the second training batch (the first pays one-off costs), then every
# tenth, five in all.
DEFAULT_SCHEDULE = make_schedule(skip_first=1, wait=9, active=1, repeat=5, skip_first_wait=1)


class SpiketraceCallback(Callback):
    """Records the training steps `schedule` picks (and validation/test batches when
    `inference`) and logs each recorded step's scalars to the trainer's loggers and `sinks`.

    `path`: where the traces go (default: `<trainer.log_dir>/spiketrace`). `schedule`: the
    training steps recorded (spiketrace.capture.schedule; None: every one). `inference`: record
    validation and test batches too, those `inference_schedule` picks (counted over each kind's
    batches; None: all). `log`: analyse recorded steps in a worker process and log their scalars
    (counters, `energy` presets, spike rates, coverage) to the trainer's loggers and to `sinks`.
    `recorder_options`: the Recorder's own keyword arguments (value_statistics, ...).
    """

    def __init__(self, path: str | os.PathLike | None = None, *, schedule: Callable | None = DEFAULT_SCHEDULE,
                 inference: bool = False, inference_schedule: Callable | None = None, log: bool = True,
                 sinks: Iterable = (), energy: Iterable[tuple] | None = None, counters: list[str] | None = None,
                 max_pending: int = 4, recorder_options: dict | None = None) -> None:
        super().__init__()
        self.path = None if path is None else os.fspath(path)
        schedules: dict[str, Callable | None] = {"train": schedule}
        if inference:
            schedules.update(validation=inference_schedule, test=inference_schedule)
        self.log_scalars = log  # not `self.log`: Lightning binds the module's log() onto its callbacks
        self.live_options = {"sinks": list(sinks), "energy": energy, "counters": counters, "max_pending": max_pending}
        self.loop = LoopRecorder(schedules, framework="lightning", live=self._make_live,
                                 recorder_options=recorder_options)
        self._root: str | None = None
        self._trainer = None
        self._hooks: list = []  # the optimizers' step post-hooks of the run in progress

    @property
    def traces(self) -> list[str]:
        """The trace directories written so far."""
        return list(self.loop.traces)

    # -- runs ------------------------------------------------------------------------------------
    def setup(self, trainer, pl_module, stage: str) -> None:
        # log_dir broadcasts under DDP: every rank calls setup, so every rank asks here
        self._root = self.path or os.path.join(trainer.log_dir or trainer.default_root_dir, "spiketrace")
        self._trainer = trainer

    def _begin(self, kind: str, trainer, pl_module) -> None:
        root = self._root or os.path.join(trainer.default_root_dir, "spiketrace")
        self.loop.begin_run(kind, root, pl_module, optimizers=lambda: list(trainer.optimizers))
        if kind == "fit":
            self._hooks = [o.register_step_post_hook(lambda *_: self._after_optimizer(pl_module))
                           for o in trainer.optimizers if isinstance(o, torch.optim.Optimizer)]

    def _end(self, failed: bool = False) -> None:
        for handle in self._hooks:
            handle.remove()
        self._hooks = []
        self.loop.end_run(failed)

    def on_fit_start(self, trainer, pl_module) -> None:
        self._begin("fit", trainer, pl_module)

    def on_fit_end(self, trainer, pl_module) -> None:
        self._end()

    def on_validation_start(self, trainer, pl_module) -> None:
        if not self.loop.running:  # trainer.validate(); inside fit the fit's trace takes it
            self._begin("validate", trainer, pl_module)

    def on_validation_end(self, trainer, pl_module) -> None:
        if self._kind_of_run(trainer) == "validate":
            self._end()

    def on_test_start(self, trainer, pl_module) -> None:
        self._begin("test", trainer, pl_module)

    def on_test_end(self, trainer, pl_module) -> None:
        self._end()

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        self._end(failed=True)

    def teardown(self, trainer, pl_module, stage: str) -> None:
        if self.loop.running:  # a run some hook above did not end (an interrupted loop)
            self._end()

    @staticmethod
    def _kind_of_run(trainer) -> str | None:
        fn = getattr(getattr(trainer, "state", None), "fn", None)
        return getattr(fn, "value", fn)

    # -- training batches --------------------------------------------------------------------------
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        self.loop.begin_step("train", global_step=trainer.global_step, epoch=trainer.current_epoch, batch=batch_idx)
        self.loop.enter("forward", "forward")

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        self.loop.enter("backward", "backward")

    def on_after_backward(self, trainer, pl_module) -> None:
        self._between(pl_module)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        self.loop.enter("optimizer", "optimizer")

    def _after_optimizer(self, pl_module) -> None:
        if self.loop.recording_step:
            self._between(pl_module)

    def _between(self, pl_module) -> None:
        """After a backward or an update: Lightning's own work under automatic optimization; the
        user's training_step (more forward work) under manual optimization."""
        if getattr(pl_module, "automatic_optimization", True):
            self.loop.pause()
        else:
            self.loop.enter("forward", "forward")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        self.loop.end_step()

    # -- validation and test batches ---------------------------------------------------------------
    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx: int, dataloader_idx: int = 0) -> None:
        kind = "sanity" if trainer.sanity_checking else "validation"
        self.loop.begin_step(kind, global_step=trainer.global_step, epoch=trainer.current_epoch, batch=batch_idx,
                             dataloader=dataloader_idx)
        self.loop.enter("validation", "forward")

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int,
                                dataloader_idx: int = 0) -> None:
        self.loop.end_step()

    def on_test_batch_start(self, trainer, pl_module, batch, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.loop.begin_step("test", global_step=trainer.global_step, epoch=trainer.current_epoch, batch=batch_idx,
                             dataloader=dataloader_idx)
        self.loop.enter("test", "forward")

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.loop.end_step()

    # -- scalars -------------------------------------------------------------------------------------
    def _make_live(self) -> LiveAnalysis | None:
        trainer = self._trainer
        if not self.log_scalars or trainer is None or not trainer.is_global_zero:
            return None
        deliver = {f"lightning {type(logger).__name__}": _logger_sink(logger) for logger in trainer.loggers}
        options = self.live_options
        return LiveAnalysis(options["sinks"], deliver=deliver, energy=options["energy"],
                            counters=options["counters"], max_pending=options["max_pending"])


def _logger_sink(logger) -> Callable[[int, dict], None]:
    def deliver(step: int, scalars: dict) -> None:
        logger.log_metrics(scalars, step=step)

    return deliver
