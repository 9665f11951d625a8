"""spiketrace.capture.huggingface.SpiketraceCallback in real Trainer runs of a small GPT-2 built
from a config (no download): the trace equals a hand-placed Recorder's on the same steps from
the same weights, evaluate() gets a trace of its own, and the scalars the Trainer's report_to
sinks receive (TensorBoard event files, the MLflow file store, a W&B offline run) equal
`spiketrace counts` on the same step."""

from __future__ import annotations

import copy
import inspect
import json
import subprocess
import sys

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from spiketrace.analyze import count, open_trace
from spiketrace.capture import Recorder
from spiketrace.capture.huggingface import SpiketraceCallback

COUNTERS = ["flop", "mac", "memory_access"]


def _model():
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16))


def _data(samples=16):
    ids = torch.randint(0, 64, (samples, 8), generator=torch.Generator().manual_seed(1))
    return [{"input_ids": row, "labels": row} for row in ids]


def _args(tmp_path, report_to=(), **options):
    return TrainingArguments(str(tmp_path / "out"), per_device_train_batch_size=4, per_device_eval_batch_size=4,
                             num_train_epochs=1, report_to=list(report_to), use_cpu=True, save_strategy="no",
                             disable_tqdm=True, logging_steps=1, dataloader_drop_last=True, seed=0, **options)


def _totals(path, step=None) -> dict:
    with open_trace(path) as trace:
        result = count(trace, COUNTERS, by=("stage",), step=step)
    frame = result.frame[result.frame["scope"] == "Global"]
    return {(row.stage, row.counter): int(row.value) for row in frame.itertuples()}


def _hand_recorded(path, model, data, recorded: set[int], accumulate: int, max_grad_norm: float,
                   optimizer_like: torch.optim.Optimizer, original: torch.nn.Module) -> None:
    """The Trainer's step as the callback records it, placed by hand: forward = the model's call,
    backward = the rest of the micro-batch (backward, the Trainer's loss bookkeeping, and before
    the update its gradient clipping), optimizer = AdamW's update."""
    # the Trainer's optimizer (its class and options: transformers picks a fused AdamW where it can)
    # and its parameter groups (weight decay on the weights, none on biases and norms)
    accepted = inspect.signature(type(optimizer_like)).parameters
    twin_of = dict(zip((id(p) for p in original.parameters()), model.parameters()))  # deepcopy: same order
    groups = [{**{k: v for k, v in g.items() if k in accepted}, "params": [twin_of[id(p)] for p in g["params"]]}
              for g in optimizer_like.param_groups]
    optimizer = type(optimizer_like)(groups, **{k: v for k, v in optimizer_like.defaults.items() if k in accepted})
    batches = [data[i:i + 4] for i in range(0, len(data), 4)]
    model.train()
    total = torch.tensor(0.0)
    with Recorder(path, model=model, optimizer=optimizer, schedule=lambda step: step in recorded) as rec:
        for step in range(len(batches) // accumulate):
            micro = batches[step * accumulate:(step + 1) * accumulate]
            with rec.suspend():  # the Trainer's count of label tokens, before the step's events
                items = sum(int((b["labels"][1:] != -100).sum()) for batch in micro for b in batch)
            for i, batch in enumerate(micro):
                with rec.suspend():  # the collator's work, not recorded by the callback either
                    inputs = {k: torch.stack([b[k] for b in batch]) for k in ("input_ids", "labels")}
                    items_tensor = torch.tensor(items)
                with rec.stage("forward"):
                    out = model(**inputs, num_items_in_batch=items_tensor)
                with rec.stage("backward"):
                    out.loss.backward()
                    loss = out.loss.detach()
                    torch.isnan(loss) or torch.isinf(loss)
                    total += loss
                    if i == len(micro) - 1 and max_grad_norm > 0:
                        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
            with rec.stage("optimizer"):
                optimizer.step()
            with rec.suspend():
                model.zero_grad()
            rec.step()


@pytest.mark.parametrize("accumulate", [1, 2])
def test_train_trace_equals_a_hand_placed_recorder(tmp_path, accumulate):
    model, data = _model(), _data()
    twin = copy.deepcopy(model)
    callback = SpiketraceCallback(tmp_path / "traces", schedule=lambda step: step in (0, 1), log=False)
    args = _args(tmp_path, gradient_accumulation_steps=accumulate, lr_scheduler_type="constant",
                 weight_decay=0.0, max_grad_norm=1.0)
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[callback])
    trainer.train()
    train = tmp_path / "traces" / "train"
    assert callback.traces == [str(train)]
    assert subprocess.run([sys.executable, "-m", "spiketrace.analyze.cli", "validate", str(train)],
                          capture_output=True).returncode == 0
    hand = tmp_path / "hand"
    _hand_recorded(hand, twin, data, {0, 1}, accumulate, 1.0,
                   getattr(trainer.optimizer, "optimizer", trainer.optimizer), model)
    ours, theirs = _totals(train), _totals(hand)
    assert {k for k in ours} == {k for k in theirs}
    for key in ours:
        assert ours[key] == theirs[key], key


def test_evaluate_gets_its_own_trace(tmp_path):
    model, data = _model(), _data()
    callback = SpiketraceCallback(tmp_path / "traces", schedule=lambda step: False, inference=True, log=False)
    trainer = Trainer(model=model, args=_args(tmp_path), train_dataset=data, eval_dataset=data[:8],
                      callbacks=[callback])
    trainer.train()  # records nothing: no trace
    trainer.evaluate()
    callback.close()
    evaluate = tmp_path / "traces" / "evaluate"
    assert callback.traces == [str(evaluate)]
    with open_trace(evaluate) as trace:
        assert [f["kind"] for f in trace.manifest["step_facts"]] == ["evaluate", "evaluate"]
        first = trace.manifest["step_facts"][0]["step"]
    twin = copy.deepcopy(model).eval()
    with torch.no_grad(), Recorder(tmp_path / "hand", model=twin) as rec, rec.stage("evaluate", phase="forward"):
        twin(**{k: torch.stack([b[k] for b in data[:4]]) for k in ("input_ids", "labels")})
    assert _totals(evaluate, first) == _totals(tmp_path / "hand")


def test_report_to_sinks_receive_the_scalars(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 refuses file stores without it
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    model, data = _model(), _data()
    callback = SpiketraceCallback(tmp_path / "traces", schedule=lambda step: step in (1, 3))
    Trainer(model=model, args=_args(tmp_path, report_to=["tensorboard", "mlflow", "wandb"]), train_dataset=data,
            callbacks=[callback]).train()
    import wandb

    wandb.finish()
    train = tmp_path / "traces" / "train"
    with open_trace(train) as trace:
        facts = trace.manifest["step_facts"]
        assert trace.manifest["loop"]["live_analysis"]["sink_failures"] == []
    expected = {}
    for fact in facts:
        counts = json.loads(subprocess.run(
            [sys.executable, "-m", "spiketrace.analyze.cli", "counts", str(train), "--step", str(fact["step"]),
             "--format", "json"], capture_output=True, text=True, check=True).stdout)
        expected.update({(fact["global_step"], f"spiketrace/{c}"): float(e["total"])
                         for c, e in counts["counters"].items()})
    from tests.sink_readers import read_mlflow, read_tensorboard, read_wandb

    readers = {"tensorboard": read_tensorboard(tmp_path / "out" / "runs" / "spiketrace"),
               "mlflow": read_mlflow(tmp_path / "mlruns"),
               "wandb": read_wandb(tmp_path / "wandb", step_key="train/global_step")}
    for sink, logged in readers.items():
        found = {(step, name): value for step, scalars in logged.items() for name, value in scalars.items()}
        assert {key: found.get(key) for key in expected} == pytest.approx(expected, rel=2 ** -23), sink
