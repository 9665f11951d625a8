"""A Lightning fit under DDP with 2 CPU processes (gloo), the SpiketraceCallback in the trainer:
written as a user writes it. Lightning starts rank 1 by running this script again.

    python lightning_ddp.py OUT
"""

import sys

import lightning as L
import torch

from spiketrace.capture.lightning import SpiketraceCallback
from tests.loop_models import SpikingClassifier, dataset, loader

if __name__ == "__main__":
    out = sys.argv[1]
    torch.manual_seed(0)
    module = SpikingClassifier()
    torch.save(module.state_dict(), f"{out}/initial.pt")
    callback = SpiketraceCallback(f"{out}/traces", schedule=lambda step: step in (0, 2))
    trainer = L.Trainer(max_epochs=2, strategy="ddp", devices=2, accelerator="cpu", callbacks=[callback],
                        logger=L.pytorch.loggers.CSVLogger(f"{out}/logs", name="run"), enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False)
    trainer.fit(module, loader(dataset()))
    if trainer.is_global_zero:
        torch.save(module.state_dict(), f"{out}/final.pt")
