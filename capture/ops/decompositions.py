"""Recording under `torch.inference_mode()` what `no_grad` records.

`torch.inference_mode()` skips autograd, and with it the decompositions autograd's dispatch
keys run: composite ops (aten.conv2d, aten.linear, aten.batch_norm) and custom ops whose
autograd kernel is a Python composite (SpikingJelly's `sj_lif.forward` on CPU) would arrive
at the dispatch mode whole, where `no_grad` gives the aten ops every counter has a rule for.
While recording, the mode runs such an op through the very kernel that decomposition is,
with itself re-entered, so the ops recorded are the ones `no_grad` records:

- a CompositeImplicitAutograd op without a CPU or CUDA kernel of its own: `func.decompose`
  (the dispatcher runs that same kernel for it under inference mode anyway);
- under inference mode, a custom op whose autograd kernel is Python code: a redispatch to
  its autograd key (with the Python key below it, so an autograd wrapper that redispatches
  below autograd reaches the mode again, and is then recorded as it comes).

The result is the one the op computes anyway; ops on tensors that are not plain strided ones
(nested, sparse) and C++ autograd kernels are left alone.
"""

from __future__ import annotations

import torch

_KEY = torch._C.DispatchKey
# The keys an op on a device reaches with autograd on, from the autograd key down: autograd,
# the Python key (an autograd wrapper redispatches below autograd, back to this mode), backend.
# No fallthrough key (autocast) may be in it: a redispatch would run its fallthrough kernel.
_AUTOGRAD_KEYSETS = {
    device: torch._C.DispatchKeySet(autograd) | torch._C.DispatchKeySet(_KEY.Python) | torch._C.DispatchKeySet(backend)
    for device, autograd, backend in (("cpu", _KEY.AutogradCPU, _KEY.CPU), ("cuda", _KEY.AutogradCUDA, _KEY.CUDA))
}
_decompositions: dict = {}
_COMPOSITE = "composite"


# Where the dispatcher says a kernel was registered, for one registered from Python: its Python
# file, or "/dev/null:<line>" in torch 2.8 and older, whose Python registrations name no file. A
# C++ kernel names its .cpp file.
PYTHON_REGISTRATIONS = (".py:", "/dev/null:")


def _python_autograd_kernel(name: str) -> bool:
    """The op's autograd kernel is Python code (a composite in disguise, or a custom_op's
    autograd wrapper that redispatches below autograd), not a C++ autograd function."""
    for line in torch._C._dispatch_dump(name).splitlines():
        if line.startswith(("AutogradCPU:", "AutogradCUDA:", "Autograd[alias]:")) and \
                any(where in line for where in PYTHON_REGISTRATIONS):
            return True
    return False


def decomposition(func) -> str | None:
    """'composite' for a CompositeImplicitAutograd op with no kernel of its own for CPU or
    CUDA, 'autograd' for a custom op whose autograd kernel is Python, else None (module docstring)."""
    found = _decompositions.get(func, False)
    if found is False:
        found = None
        try:
            name, has = func.name(), torch._C._dispatch_has_kernel_for_dispatch_key
            if has(name, "CompositeImplicitAutograd") and not has(name, "CPU") and not has(name, "CUDA"):
                found = "composite"
            elif func.namespace not in ("aten", "prim", "prims") and _python_autograd_kernel(name):
                found = "autograd"
        except Exception:  # noqa: BLE001 - an op torch cannot describe is recorded as it comes
            pass
        _decompositions[func] = found
    return found


def _dense_tensors(args, kwargs) -> list[torch.Tensor] | None:
    """The tensor arguments, or None if one is not a plain strided tensor (its own kernels apply)."""
    tensors = []
    for value in (*args, *kwargs.values()):
        items = value if isinstance(value, (list, tuple)) else (value,)
        tensors += [a for a in items if isinstance(a, torch.Tensor)]
    if any(t.layout is not torch.strided or t.is_nested for t in tensors):
        return None
    return tensors


def may_decompose(func) -> bool:
    """False for an op already known to be recorded as it comes (the per-op fast path)."""
    return _decompositions.get(func, False) is not None


def decomposition_plan(func, args, kwargs, redispatching: set):
    """None (record the op as it comes), COMPOSITE, or the dispatch keys to redispatch to."""
    kind = decomposition(func)
    if kind is None:
        return None
    tensors = _dense_tensors(args, kwargs)
    if not tensors:
        return None
    if kind == "composite":
        return _COMPOSITE
    if not torch.is_inference_mode_enabled() or func in redispatching:
        return None
    return _AUTOGRAD_KEYSETS.get(tensors[0].device.type)


def run_decomposed(plan, func, args, kwargs, redispatching: set):
    """Run the op through its decomposition (call it with the mode re-entered)."""
    if plan is _COMPOSITE:
        return func.decompose(*args, **kwargs)
    redispatching.add(func)
    try:
        return func.redispatch(plan, *args, **kwargs)
    finally:
        redispatching.discard(func)
