"""A user's compiled model and function, captured.

usage: python compiled_model.py OUT_DIR

torch.compile(backend="eager") needs no C compiler; if even that cannot run here, writes
{"skip": reason}. Otherwise captures, into OUT_DIR/<case>: a torch.compile(module) called
under capture ("wrapped"), a module.compile() ("in_place"), and a compiled function
("function"); then an uncompiled model ("plain"). Writes OUT_DIR/result.json: each case's
output compared with the uncompiled, uncaptured model's.
"""

import copy
import json
import logging
import sys
from pathlib import Path

import torch
from torch import nn

from spiketrace.capture import Recorder

out_dir = Path(sys.argv[1])
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
try:
    torch.compile(lambda t: t * 2, backend="eager")(torch.ones(2))
except Exception as exc:  # noqa: BLE001 - whatever stops torch.compile here skips the job
    (out_dir / "result.json").write_text(json.dumps({"skip": f"torch.compile cannot run here: {exc}"}))
    sys.exit(0)

torch.manual_seed(0)
net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
x = torch.randn(5, 8)
with torch.no_grad():
    expected = net(x)


@torch.compile(backend="eager")
def head(t):
    return torch.relu(t) * 3.0


cases = {
    "wrapped": lambda: torch.compile(copy.deepcopy(net), backend="eager"),
    "in_place": lambda: copy.deepcopy(net),
    "function": lambda: copy.deepcopy(net),
    "plain": lambda: copy.deepcopy(net),
}
result = {}
for name, make in cases.items():
    model = make()
    if name == "in_place":
        model.compile(backend="eager")
    with Recorder(out_dir / name, model=model) as recorder, torch.no_grad(), recorder.stage("forward"):
        out = model(x)
        if name == "function":
            out = head(out) / 3.0
            expected_out = torch.relu(expected) * 3.0 / 3.0
        else:
            expected_out = expected
    result[name] = bool(torch.equal(out, expected_out))
(out_dir / "result.json").write_text(json.dumps(result))
