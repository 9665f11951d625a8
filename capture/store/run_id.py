"""One id per capture run, agreed by every rank, so a trace root's shards of an older run
(a 2-rank run's rank 1 left behind by a later 1-process run) are told apart from this one's.

Where the id comes from, first that applies:
1. `Recorder(run_id=...)` (or TraceWriter's), or the SPIKETRACE_RUN_ID environment variable;
2. torch.distributed's store, when a process group is initialized: the first rank to reach
   `compare_set` on a key naming the trace root (and how many runs this process has started
   there) sets its candidate, every other rank gets that value back. No rank waits on
   another, so a job where only some ranks capture cannot hang here;
3. the launcher's job id (TORCHELASTIC_RUN_ID unless torchrun's placeholder "none",
   SLURM_JOB_ID with SLURM_STEP_ID), shared by the ranks of one launch;
4. otherwise an id of this process for this root, shared by every rank this process opens
   there (tests and notebooks write several ranks from one process) and renewed when a rank
   is opened there again (a re-run is a new run).

The source is recorded beside the id (`run_id_source`), so a reader can say why two ranks
disagree.
"""

from __future__ import annotations

import logging
import os
import sys
import uuid
from pathlib import Path

logger = logging.getLogger("spiketrace.capture")

# abs root -> [runs started here by this process, id of the current local run, its ranks]
_LOCAL_RUNS: dict[str, list] = {}


def _launcher_id() -> str | None:
    elastic = os.environ.get("TORCHELASTIC_RUN_ID")
    if elastic and elastic != "none":
        return f"torchelastic-{elastic}"
    slurm = os.environ.get("SLURM_JOB_ID")
    if slurm:
        return f"slurm-{slurm}-{os.environ.get('SLURM_STEP_ID', '0')}"
    return None


def _from_store(key: str, candidate: str) -> str | None:
    torch = sys.modules.get("torch")  # the writer runs without torch too; no torch, no group
    if torch is None:
        return None
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        return None
    try:
        store = dist.distributed_c10d._get_default_store()
        agreed = store.compare_set(key, "", candidate)
        return agreed.decode() if isinstance(agreed, bytes) else str(agreed)
    except Exception as exc:  # noqa: BLE001 - a private API: fall back, say so once
        logger.warning("spiketrace: could not agree on a run id through torch.distributed's store (%s)", exc)
        return None


def agree_run_id(root: str | os.PathLike, rank: int, explicit: str | None = None) -> tuple[str, str]:
    """(run id, its source) for a capture of `rank` into `root`; see the module docstring."""
    given = explicit or os.environ.get("SPIKETRACE_RUN_ID")
    if given:
        return str(given), "given"
    where = str(Path(root).absolute())
    local = _LOCAL_RUNS.setdefault(where, [0, None, set()])
    if local[1] is None or rank in local[2]:
        local[0] += 1
        local[1], local[2] = uuid.uuid4().hex, set()
    local[2].add(rank)
    agreed = _from_store(f"spiketrace/run_id/{where}/{local[0]}", uuid.uuid4().hex)
    if agreed:
        return agreed, "store"
    launcher = _launcher_id()
    if launcher:
        return launcher, "launcher"
    return local[1], "process"
