"""capture/ops/dispatch.py keeps TorchDynamo out of the recording handler by itself (its code
marked skip, the eval-frame callback off while it runs) instead of torch's per-call
torch._disable_dynamo wrapper: a compiled function called under capture never has a frame of
capture/ handed to Dynamo, and the user's result is the one it gives without capture."""

from __future__ import annotations

import torch

from spiketrace.capture import Recorder
from spiketrace.capture.ops.dispatch import RecordingMode, set_eval_frame


def test_the_handler_is_not_wrapped_when_torch_has_the_switches():
    handler = RecordingMode.__dict__["__torch_dispatch__"]
    if set_eval_frame is None:  # a torch without them: its own wrapper stays
        assert getattr(handler, "_torchdynamo_disable", False) or hasattr(handler, "__wrapped__")
    else:
        assert handler.__code__.co_filename.endswith("dispatch.py")  # the plain function, no wrapper frame


def test_dynamo_is_never_handed_a_frame_of_capture(tmp_path):
    import torch._dynamo.convert_frame as convert_frame

    def head(t):
        return torch.relu(t * 2.0) + t.sum()

    compiled = torch.compile(head, backend="eager")
    x = torch.linspace(-1, 1, 8)
    with Recorder(tmp_path / "trace"):
        got = compiled(x)
        inner = torch.nn.functional.gelu(x)  # an eager op while Dynamo has been active
    assert torch.equal(got, head(x)) and torch.equal(inner, torch.nn.functional.gelu(x))
    handed = [ref() for ref in convert_frame.input_codes.seen]
    files = {code.co_filename for code in handed if code is not None}
    assert not [f for f in files if "/capture/" in f], files
