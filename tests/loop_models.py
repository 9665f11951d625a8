"""Models and data of the training-loop tests, written as their users write them: a
LightningModule around a SpikingJelly network, and the hand-written loop with a Recorder that
places the stages where the callback says Lightning's hooks place them."""

from __future__ import annotations

import lightning as L
import torch
from spikingjelly.activation_based import functional, layer, neuron, surrogate

from spiketrace.capture import Recorder

T = 4  # time steps per sample


class SpikingClassifier(L.LightningModule):
    """A two-layer LIF classifier, the input repeated over T steps (rate coding)."""

    def __init__(self, features: int = 16, hidden: int = 32, classes: int = 4, lr: float = 0.1,
                 manual: bool = False) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            layer.Linear(features, hidden), neuron.LIFNode(surrogate_function=surrogate.ATan()),
            layer.Linear(hidden, classes), neuron.LIFNode(surrogate_function=surrogate.ATan()))
        self.lr = lr
        self.automatic_optimization = not manual

    def forward(self, x):
        rate = sum(self.net(x) for _ in range(T)) / T
        functional.reset_net(self.net)
        return rate

    def loss_of(self, batch):
        x, y = batch
        return torch.nn.functional.cross_entropy(self(x), y)

    def training_step(self, batch, batch_idx):
        loss = self.loss_of(batch)
        if self.automatic_optimization:
            return loss
        optimizer = self.optimizers()
        optimizer.zero_grad()
        self.manual_backward(loss)
        optimizer.step()
        return loss.detach()

    def validation_step(self, batch, batch_idx):
        return self.loss_of(batch)

    def test_step(self, batch, batch_idx):
        return self.loss_of(batch)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


def dataset(samples: int = 32, features: int = 16, classes: int = 4, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    return torch.utils.data.TensorDataset(torch.rand(samples, features, generator=generator),
                                          torch.randint(0, classes, (samples,), generator=generator))


def loader(data, batch_size: int = 8):
    return torch.utils.data.DataLoader(data, batch_size=batch_size, shuffle=False)


def hand_recorded_fit(path, module: SpikingClassifier, batches, recorded: set[int], epochs: int,
                      accumulate: int = 1, autocast: bool = False) -> None:
    """What the callback records, placed by hand: the training steps whose index is in `recorded`,
    forward = training_step plus Lightning's copy of the loss (and its division under gradient
    accumulation), backward, optimizer = the update; nothing between them."""
    optimizer = module.configure_optimizers()
    index = 0
    context = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else torch.autocast("cpu", enabled=False)
    with Recorder(path, model=module, optimizer=optimizer, schedule=lambda step: step in recorded) as rec:
        for _ in range(epochs):
            for batch_idx, batch in enumerate(batches):
                steps = (batch_idx + 1) % accumulate == 0 or batch_idx + 1 == len(batches)
                with rec.stage("forward"):
                    with context:
                        loss = module.loss_of(batch)
                    loss = loss / accumulate
                    loss.detach().clone()  # Lightning's ClosureResult keeps a copy of the loss it reports
                with rec.suspend():
                    if batch_idx % accumulate == 0:
                        optimizer.zero_grad()
                with rec.stage("backward"):
                    loss.backward()
                if steps:
                    with rec.stage("optimizer"):
                        optimizer.step()
                rec.step()
                index += 1
