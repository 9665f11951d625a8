"""Two ranks of a job open the same trace directory at the same moment, many times over.

usage: python two_ranks_start.py OUT_DIR [TRIALS]

Two processes are spawned as a launcher would (RANK / WORLD_SIZE in the environment, and the
job's id in TORCHELASTIC_RUN_ID, as `torchrun --standalone` sets it: no process group, so the
ranks agree on the capture's run id through it); in
each trial both wait on a barrier, then open a Recorder on OUT_DIR/trial-N at once, record a
few ops and close. Writes OUT_DIR/result.json: per rank, the errors its trials raised.
"""

import json
import os
import sys
from pathlib import Path

import torch.multiprocessing as mp


def worker(rank: int, out_dir: str, trials: int, barrier, errors) -> None:
    os.environ["RANK"], os.environ["WORLD_SIZE"] = str(rank), "2"
    os.environ["TORCHELASTIC_RUN_ID"] = f"job-{os.getppid()}"
    import torch

    from spiketrace.capture import Recorder

    model = torch.nn.Linear(8, 4)
    for trial in range(trials):
        barrier.wait()
        try:
            with Recorder(Path(out_dir) / f"trial-{trial}", model=model) as recorder, recorder.stage("forward"):
                model(torch.full((2, 8), float(rank))).sum()
        except Exception as exc:  # noqa: BLE001 - reported, the test decides
            errors.append(f"rank {rank} trial {trial}: {type(exc).__name__}: {exc}")


if __name__ == "__main__":
    out_dir = Path(sys.argv[1])
    trials = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    context = mp.get_context("spawn")
    with context.Manager() as manager:
        barrier, errors = manager.Barrier(2), manager.list()
        mp.spawn(worker, args=(str(out_dir), trials, barrier, errors), nprocs=2, join=True)
        (out_dir / "result.json").write_text(json.dumps({"errors": list(errors)}))
