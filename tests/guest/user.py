"""What a guest program imports: the capture when the harness asks for it, nothing otherwise.

A program in tests/guest/programs/ is written as a user writes a script, with one difference:
it opens its Recorder through `recording(...)`, which is a real `spiketrace.capture.Recorder` when the
harness runs it under capture (SPIKETRACE_GUEST_TRACE names the trace) and a stand-in whose
`stage`, `suspend` and `step` do nothing when it runs plain. Everything the user would look at
(outputs, losses, gradients, parameters, the exceptions the program caught) goes to `report`,
which the harness compares between the two runs.
"""

from __future__ import annotations

import contextlib
import os
import pickle

TRACE = os.environ.get("SPIKETRACE_GUEST_TRACE")
_SEEN: dict = {}


class _Plain:
    """The Recorder's user-facing surface, doing nothing: the plain run."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    @contextlib.contextmanager
    def stage(self, *args, **kwargs):
        yield self

    @contextlib.contextmanager
    def suspend(self):
        yield self

    def step(self):
        pass


def recording(model=None, optimizer=None, **options):
    if TRACE is None:
        return _Plain()
    from spiketrace.capture import Recorder

    if os.environ.get("SPIKETRACE_GUEST_DEFER"):  # the device path (defer_statistics), on CPU
        options.setdefault("defer_statistics", True)
    return Recorder(TRACE, model=model, optimizer=optimizer, **options)


def under_capture() -> bool:
    return TRACE is not None


def _plain_values(value):
    """Tensors as (dtype, shape, values as a list) so the comparison needs no torch identity."""
    import torch

    if isinstance(value, torch.Tensor):
        if value.is_sparse or value.layout is not torch.strided or value.is_quantized or value.is_nested:
            try:
                value = value.to_dense() if not value.is_quantized else value.dequantize()
            except Exception:  # noqa: BLE001 - the best a test can compare
                return ("tensor", str(value.dtype), repr(value))
        if value.device.type == "meta":
            return ("meta", str(value.dtype), tuple(value.shape))
        detached = value.detach()
        if detached.dtype.is_complex:
            detached = torch.view_as_real(detached.resolve_conj())
        detached = detached.resolve_neg().resolve_conj().contiguous()
        if detached.dtype not in (torch.float32, torch.float64, torch.int64, torch.bool, torch.int32):
            detached = detached.to(torch.float64)
        return ("tensor", str(value.dtype), tuple(value.shape), detached.flatten().tolist())
    if isinstance(value, dict):
        return {key: _plain_values(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain_values(item) for item in value)
    return value


def report(**values) -> None:
    """Record what the user sees; written at exit to SPIKETRACE_GUEST_OUT."""
    _SEEN.update({key: _plain_values(value) for key, value in values.items()})
    with open(os.environ["SPIKETRACE_GUEST_OUT"], "wb") as out:
        pickle.dump(_SEEN, out)
