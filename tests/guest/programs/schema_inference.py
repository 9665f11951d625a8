"""A forward pass under torch.inference_mode(), whose outputs are then used outside it:
inference tensors keep no version counter, and their `tensors` rows hold version -1."""

import torch

from tests.guest.user import recording, report

torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
x = torch.randn(3, 4)
with recording(model=net) as rec:
    with rec.stage("forward"):
        with torch.inference_mode():
            scores = net(x)
            scores.mul_(2)  # in place on an inference tensor, inside inference mode
        probabilities = scores.softmax(dim=1)  # an inference tensor read outside it
        best = probabilities.argmax(dim=1)
report(scores=scores, probabilities=probabilities, best=best, is_inference=scores.is_inference(),
       outside_is_inference=probabilities.is_inference())
