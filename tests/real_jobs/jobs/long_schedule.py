"""A user's long training loop under a schedule, and the same loop recorded at every step.

usage: python long_schedule.py OUT_DIR STEPS

Part 1 trains a small spiking MLP for STEPS steps under a schedule (skip 10, then cycles of
wait 20, warm-up 2, record 3) with on_trace_ready, noting the process's resident memory at
step 100 and at the last step. Part 2 records every step of STEPS/3, a cycle of 10 steps
flushed at a time, noting resident memory at STEPS/9 and STEPS/3. Both note the most
multi-grad hooks the tracker held. A plain twin trains the same steps uncaptured. Writes
OUT_DIR/result.json.
"""

import copy
import json
import sys
from contextlib import nullcontext
from pathlib import Path

import torch
from spikingjelly.activation_based import functional, layer, neuron
from torch import nn

from spiketrace.capture import Recorder, schedule

out_dir, STEPS = Path(sys.argv[1]), int(sys.argv[2])
T, BATCH = 4, 32


def rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * 4096


torch.manual_seed(0)
net = nn.Sequential(layer.Linear(64, 256), neuron.LIFNode(), layer.Linear(256, 256), neuron.LIFNode(),
                    layer.Linear(256, 10))
functional.set_step_mode(net, "m")
twin = copy.deepcopy(net)  # trained plain; every captured run starts from a copy of `net`
xs = (torch.rand(8, T, BATCH, 64) < 0.3).float()
ys = torch.randint(0, 10, (8, BATCH))


def train(model, optimizer, step, stage=None, recorder=None):
    stage = stage or (lambda name: nullcontext())
    optimizer.zero_grad(set_to_none=True)
    with stage("forward"):
        out = model(xs[step % 8]).mean(0)
    loss = nn.functional.cross_entropy(out, ys[step % 8])
    with stage("backward"):
        loss.backward()
    with stage("sgd_step"):
        optimizer.step()
    functional.reset_net(model)
    loss = float(loss).hex()
    if recorder is not None:
        recorder.held_hooks = max(recorder.held_hooks, recorder.tracker.held_hooks)
        recorder.step()
    return loss


def run(path, rule, steps, measure_at):
    model = copy.deepcopy(net)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    ready, rss, losses = [], {}, []
    with Recorder(path, model=model, optimizer=optimizer, schedule=rule, on_trace_ready=ready.append) as recorder:
        recorder.held_hooks = 0  # the most grad hooks the tracker held, just before a step ended
        for step in range(steps):
            losses.append(train(model, optimizer, step, recorder.stage, recorder))
            if step + 1 in measure_at:
                rss[step + 1] = rss_bytes()
    return {"ready": len(ready), "rss": rss, "held_hooks": recorder.held_hooks,
            "losses": losses, "parameters": [p.detach().clone() for p in model.parameters()]}


plain_optimizer = torch.optim.SGD(twin.parameters(), lr=0.05, momentum=0.9)
plain_losses = [train(twin, plain_optimizer, step) for step in range(STEPS)]

scheduled = run(out_dir / "scheduled", schedule(skip_first=10, wait=20, warmup=2, active=3), STEPS, (100, STEPS))
every = run(out_dir / "every", schedule(active=10), STEPS // 3, (STEPS // 9, STEPS // 3))
result = {
    "plain_losses": plain_losses,
    "parameters_identical": all(torch.equal(a, b) for a, b in zip(twin.parameters(), scheduled["parameters"])),
}
for name, part in (("scheduled", scheduled), ("every", every)):
    part.pop("parameters")
    result[name] = part
(out_dir / "result.json").write_text(json.dumps(result))
