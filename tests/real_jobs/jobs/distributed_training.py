"""A user's data-parallel training on 2 gloo processes (DDP or FSDP2), every rank captured.

usage: python distributed_training.py OUT_DIR ddp|fsdp

Two processes are spawned as a launcher would; each joins a gloo process group on localhost,
wraps a small conv net (DistributedDataParallel, or fully_shard on each block and the root)
and trains 2 steps uncaptured (the twin), then, after a barrier, opens a Recorder on
OUT_DIR/trace at the same moment as the other rank and trains the same 2 steps from the same
start. Writes OUT_DIR/result-rank<R>.json: whether the captured run's losses and parameters
(this rank's shards) are bit-identical to the twin's, the parameters' bytes, and any error.
"""

import json
import os
import socket
import sys
import traceback
from pathlib import Path

import torch.multiprocessing as mp

STEPS = 2


def build(kind):
    import torch
    from torch import nn

    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU()),
        nn.Sequential(nn.Flatten(), nn.Linear(4 * 6 * 6, 5)),
    )
    if kind == "ddp":
        return nn.parallel.DistributedDataParallel(net)
    from torch.distributed.fsdp import fully_shard

    for block in net:
        fully_shard(block)
    return fully_shard(net)


def train(model, rank, recorder=None):
    from contextlib import nullcontext

    import torch

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    stage = recorder.stage if recorder is not None else (lambda name: nullcontext())
    losses = []
    for step in range(STEPS):
        generator = torch.Generator().manual_seed(100 * step + rank)  # each rank its own batch
        x = torch.randn(3, 2, 6, 6, generator=generator)
        y = torch.randint(0, 5, (3,), generator=generator)
        optimizer.zero_grad(set_to_none=True)
        with stage("forward"):
            out = model(x)
        loss = torch.nn.functional.cross_entropy(out, y)
        with stage("backward"):
            loss.backward()
        with stage("optimizer"):
            optimizer.step()
        losses.append(float(loss).hex())
        if recorder is not None:
            recorder.step()
    local = [p.to_local() if hasattr(p, "to_local") else p for p in model.parameters()]
    return losses, [t.detach().clone() for t in local]


def worker(rank: int, out_dir: str, kind: str, port: int) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch
    import torch.distributed as dist

    from spiketrace.capture import Recorder

    result = {"rank": rank}
    try:
        dist.init_process_group("gloo", rank=rank, world_size=2)
        twin_losses, twin_parameters = train(build(kind), rank)
        model = build(kind)
        result["parameter_bytes"] = sum(p.numel() * p.element_size() for p in model.parameters())
        dist.barrier()  # both ranks open the trace at once
        with Recorder(Path(out_dir) / "trace", model=model) as recorder:
            losses, parameters = train(model, rank, recorder)
        result["identical"] = losses == twin_losses and all(
            torch.equal(a, b) for a, b in zip(parameters, twin_parameters))
        dist.barrier()
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - reported, the test decides
        result["error"] = traceback.format_exc()
    (Path(out_dir) / f"result-rank{rank}.json").write_text(json.dumps(result))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


if __name__ == "__main__":
    out_dir, kind = Path(sys.argv[1]), sys.argv[2]
    mp.spawn(worker, args=(str(out_dir), kind, free_port()), nprocs=2, join=True)
