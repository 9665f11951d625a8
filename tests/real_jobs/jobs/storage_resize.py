"""A user's loop that reuses output buffers (out=) and frees storages by resizing them, as
FSDP2 does with its parameters (`untyped_storage().resize_(0)`, later resized back).

usage: python storage_resize.py OUT_DIR

Everything runs under a Recorder (OUT_DIR/trace). Writes OUT_DIR/result.json with the
sizes the storages ended at and the nnz of each out= result, counted here.
"""

import json
import sys
from pathlib import Path

import torch
from torch import nn

from spiketrace.capture import Recorder

out_dir = Path(sys.argv[1])
torch.manual_seed(0)
layer = nn.Linear(64, 64)
spikes = (torch.rand(16, 64) < 0.3).float()  # binary, > 256 elements: the scanned path
dense = torch.randn(16, 64)

result = {}
with Recorder(out_dir / "trace", model=layer) as recorder, recorder.stage("forward"):
    # out= into a buffer the capture has already seen, first at its size, then growing it
    buffer = torch.empty(16, 64)
    torch.mul(spikes, 1.0, out=buffer)
    buffer.resize_(0)  # as torch asks before reusing an out= tensor at another size
    torch.cat([spikes, dense], out=buffer)
    result["cat_nnz"] = int((buffer != 0).sum())
    torch.add(buffer, 1.0, out=buffer)
    sums = torch.empty(0)
    torch.sum(spikes, dim=0, out=sums)  # resizes an empty buffer
    result["sum_nnz"] = int((sums != 0).sum())

    # free an activation's storage after use, as activation offloading does
    hidden = layer(spikes)
    activation = torch.relu(hidden)
    total = activation.sum()
    activation.untyped_storage().resize_(0)
    result["activation_storage"] = activation.untyped_storage().nbytes()

    # FSDP2-style: free a parameter's storage after the forward, re-allocate, refill
    weight = layer.weight
    saved = weight.detach().clone()
    numel_bytes = weight.untyped_storage().nbytes()
    weight.untyped_storage().resize_(0)
    result["freed_weight_storage"] = weight.untyped_storage().nbytes()
    weight.untyped_storage().resize_(numel_bytes)
    with torch.no_grad():
        weight.copy_(saved)
    again = layer(spikes)
    result["weight_restored"] = bool(torch.equal(layer.weight, saved))
    result["outputs_equal"] = bool(torch.equal(again, hidden))
    result["total"] = float(total.detach()).hex()

(out_dir / "result.json").write_text(json.dumps(result))
