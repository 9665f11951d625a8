"""Which forward GEMM a backward input-gradient GEMM answers, SpikingJelly's way.

SpikingJelly's trace fallback keeps, per key (op, x.shape, out.shape), a LIFO queue of the
spike-ness of forward GEMM inputs. A backward input-gradient GEMM pops the queue keyed
(op, its out.shape, its x.shape), or, when that one is empty, the addmm <-> mm alternative.
The popped flag picks bp_grad (spiking input) or ann_be. Two queues can feed one pop, so the
order matters: this is the one rule replayed as a small state machine, over GEMM events
only, in record order. The label changes no energy (bp_grad and ann_be cost the same); it
matters for SpikingJelly's per-core-type breakdown and its duplicate test.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from spiketrace.analyze.energy.neuromc.rules import GEMM_ALTERNATIVE


def forward_spike_of_backward_gemms(events: pd.DataFrame, kind: pd.Series) -> pd.Series:
    """For each event with kind 'bp', the spike flag SpikingJelly pops; False elsewhere.
    `events` must be in (rank, seq) order with op, x_key, out_key, x_spike columns."""
    result = np.zeros(len(events), dtype=bool)
    rows = np.flatnonzero(kind.isin(["forward", "bp"]).to_numpy())
    queues: dict[tuple, list[bool]] = {}
    columns = [events[c].to_numpy()[rows] for c in ("rank", "op", "x_key", "out_key", "x_spike")]
    for row, direction, (rank, op, x_key, out_key, spike) in zip(rows, kind.to_numpy()[rows], zip(*columns)):
        if direction == "forward":
            queues.setdefault((rank, op, x_key, out_key), []).append(bool(spike))
            continue
        queue = queues.get((rank, op, out_key, x_key))
        if not queue and op in GEMM_ALTERNATIVE:
            queue = queues.get((rank, GEMM_ALTERNATIVE[op], out_key, x_key))
        if queue:
            result[row] = queue.pop()
    return pd.Series(result, index=events.index)
