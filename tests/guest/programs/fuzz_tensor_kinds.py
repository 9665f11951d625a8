"""Seeded fuzz of tensor kinds x ops: a script that builds a tensor of a drawn kind
and applies a drawn chain of one to three ops, case after case, in one open recording.

Environment:
    SPIKETRACE_FUZZ_SEED     the seed (default 0)
    SPIKETRACE_FUZZ_CASES    how many cases (default 60)
    SPIKETRACE_FUZZ_OPTIONS  JSON object of keyword options for recording(...), e.g.
                             '{"value_statistics": "synaptic", "defer_statistics": true}'
    SPIKETRACE_FUZZ_ONLY     comma-separated case indices: run only those (reproduces a case alone)
    SPIKETRACE_FUZZ_SKIP     comma-separated kinds whose cases are left out (the others draw the same),
                             to look past a failure already known

Case i is drawn from its own random.Random(f"{seed}:{i}") and torch.Generator, so a case is the
same whether or not the others run. Each case runs in a stage of its own, `forward_caseNNN`,
and in a try/except of its own: the report holds, under the key
`case_NNN_<kind><shape>[_unseen]_<op>[=<parameter>]_...` (`unseen`: the tensor was built under
rec.suspend(), so the capture first sees it as an op's input), either what the chain returned
and the input after it (values, dtype, shape, strides, layout, autograd facts, version counter,
aliasing, a subclass's log) or the exception's type and first message line.
Plain torch decides what is legal: a chain it refuses must be refused the same under capture.
Each case's key goes to stderr before it runs, so a segfault names the case it died in.
"""

import faulthandler
import json
import os
import random
import sys
import zlib

import torch
import torch.nn.functional as F

from tests.guest.user import recording, report

faulthandler.enable()  # a segfault prints the Python stack (and still dies of the signal)
SEED = int(os.environ.get("SPIKETRACE_FUZZ_SEED", "0"))
CASES = int(os.environ.get("SPIKETRACE_FUZZ_CASES", "60"))
OPTIONS = json.loads(os.environ.get("SPIKETRACE_FUZZ_OPTIONS", "{}"))
ONLY = os.environ.get("SPIKETRACE_FUZZ_ONLY")
SKIP = set(os.environ.get("SPIKETRACE_FUZZ_SKIP", "").split(","))

# Three past capture/tensors/value_counts.py's SMALL_TENSOR (256 elements): the vectorised
# statistics; (64, 1024) past the 128 KiB from which the compiled scans share a tensor among
# threads (capture/native/_native_parallel.c).
SHAPES = [(4, 5), (2, 3, 4), (6,), (2, 3, 4, 5), (32, 64), (4, 8, 16), (2, 3, 8, 8), (64, 1024)]
SCALARS = {"2": 2, "half": 0.5, "minus3": -3, "nan": float("nan"), "inf": float("inf"), "minusinf": float("-inf"),
           "minuszero": -0.0, "zero": 0, "true": True, "1e30": 1e30}
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64, "float32": torch.float32,
          "int32": torch.int32, "int8": torch.int8, "bool": torch.bool, "complex64": torch.complex64}
log: list = []  # the subclass's calls, as its user would keep them


class Logged(torch.Tensor):
    """A user's tensor subclass with a __torch_function__ of its own."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        log.append(getattr(func, "__name__", str(func)))
        return super().__torch_function__(func, types, args, kwargs or {})


class Case:
    """One case's random sources, draws (r) and tensor values (g), and its drawn shape."""

    def __init__(self, index: int) -> None:
        name = f"{SEED}:{index}"
        self.r = random.Random(name)
        self.g = torch.Generator().manual_seed(zlib.crc32(name.encode()))
        self.size = self.r.choice(SHAPES)

    def randn(self, *shape):
        return torch.randn(shape, generator=self.g)


# -- kinds: name -> (case -> tensor) ---------------------------------------------------------------

def _inference(c):
    with torch.inference_mode():
        return c.randn(*c.size) * 2


def _freed(c):
    t = c.randn(64, 64)
    t.untyped_storage().resize_(0)
    return t


def _shrunk(c):
    t = c.randn(64, 64)
    t.untyped_storage().resize_(40)  # 10 float32 values left
    return t


def _sparse(c):
    return c.randn(4, 5) * (c.randn(4, 5) > 0)


KINDS = {
    "float32": lambda c: c.randn(*c.size),
    "spikes": lambda c: (c.randn(*c.size) > 0).float(),
    "transposed": lambda c: c.randn(*c.size).transpose(0, -1),
    "stepslice": lambda c: c.randn(8, 10)[::2, 1::3],
    "expanded": lambda c: c.randn(4, 1).expand(4, 5),
    "channelslast": lambda c: c.randn(*c.size).contiguous(memory_format=torch.channels_last),  # size 4-D
    "zerosize": lambda c: c.randn(0, 5),
    "zerodim": lambda c: c.randn(),
    "bool": lambda c: c.randn(*c.size) > 0,
    "int8": lambda c: torch.randint(-5, 5, c.size, dtype=torch.int8, generator=c.g),
    "int32": lambda c: torch.randint(-5, 5, c.size, dtype=torch.int32, generator=c.g),
    "int64": lambda c: torch.randint(-5, 5, c.size, generator=c.g),
    "float16": lambda c: c.randn(*c.size).half(),
    "bfloat16": lambda c: c.randn(*c.size).bfloat16(),
    "float64": lambda c: c.randn(*c.size).double(),
    "complex64": lambda c: torch.randn(c.size, dtype=torch.complex64, generator=c.g),
    "conj": lambda c: torch.randn(c.size, dtype=torch.complex64, generator=c.g).conj(),
    "negview": lambda c: torch._neg_view(c.randn(*c.size)),
    "sparsecoo": lambda c: _sparse(c).to_sparse(),
    "sparsecsr": lambda c: _sparse(c).to_sparse_csr(),
    "nestedstrided": lambda c: torch.nested.nested_tensor([c.randn(2, 5), c.randn(3, 5)]),
    "nestedjagged": lambda c: torch.nested.nested_tensor([c.randn(2, 5), c.randn(3, 5)], layout=torch.jagged),
    "quantized": lambda c: torch.quantize_per_tensor(c.randn(*c.size), 0.1, 0, torch.quint8),
    "inference": _inference,
    "freed": _freed,
    "shrunk": _shrunk,
    "leaf": lambda c: c.randn(*c.size).requires_grad_(),
    "subclass": lambda c: c.randn(*c.size).as_subclass(Logged),
    "parameter": lambda c: torch.nn.Parameter(c.randn(*c.size)),
    "meta": lambda c: torch.empty(c.size, device="meta"),
}


# Kinds of a shape of their own; the others take the case's drawn shape (named in its key).
FIXED_SHAPES = {"stepslice", "expanded", "zerosize", "zerodim", "sparsecoo", "sparsecsr", "nestedstrided",
                "nestedjagged", "freed", "shrunk"}


# -- ops: name -> (case -> (label, tensor -> value)) -------------------------------------------------
# A builder draws the op's parameters (a scalar, a dtype, the partner's form) when the case is
# drawn, so the label names them; the op itself makes its operands when it runs.

def _last(x) -> int:
    try:
        return int(x.shape[-1])
    except Exception:  # noqa: BLE001 - nested and 0-d tensors: any width, plain torch decides
        return 5


def fixed(fn):
    return lambda c, name: (name, fn)


def with_scalar(apply):
    def build(c, name):
        label = c.r.choice(list(SCALARS))
        return f"{name}={label}", lambda x: apply(x, SCALARS[label])
    return build


def binary(apply):
    """An op of x and a partner: of x's shape, its last dimension or 0-d; x's dtype or float32."""
    def build(c, name):
        form, same_dtype = c.r.choice(["same", "last", "zerodim"]), c.r.random() < 0.5
        return (f"{name}={form}{'' if same_dtype else '-f32'}",
                lambda x: apply(x, partner(c, x, form, same_dtype)))
    return build


def partner(c, x, form, same_dtype):
    if form == "same":
        try:
            shape = tuple(int(s) for s in x.shape)
        except Exception:  # noqa: BLE001 - a nested or jagged shape: broadcast over its rows
            shape = (_last(x),)
    else:
        shape = (_last(x),) if form == "last" else ()
    t = torch.randn(shape, generator=c.g)
    if same_dtype and not x.is_quantized:
        t = t.to(x.dtype)
    return t.to("meta") if x.is_meta else t


def _to_dtype(c, name):
    label = c.r.choice(list(DTYPES))
    return f"{name}={label}", lambda x: x.to(DTYPES[label])


def _weight(x, *shape):
    w = torch.ones(shape) * 0.1
    return w.to("meta") if x.is_meta else w


def _index(x):
    rows = max(int(x.shape[0]), 1)
    return x[torch.tensor([0, rows - 1, rows // 2])]


def _out(apply):
    def run(x):
        buffer = torch.empty(0, dtype=x.dtype, device=x.device)
        apply(x, buffer)
        return buffer
    return run


def _backward(x):
    x.sum().backward()
    return x


OPS = {
    "add": binary(lambda x, y: x + y),
    "mul": binary(lambda x, y: x * y),
    "sub": binary(lambda x, y: x - y),
    "div": binary(lambda x, y: x / y),
    "where": binary(lambda x, y: torch.where(x > 0, x, y)),
    "stack": binary(lambda x, y: torch.stack([x, y])),
    "addinplace": binary(lambda x, y: x.add_(y)),
    "adds": with_scalar(lambda x, s: x + s),
    "muls": with_scalar(lambda x, s: x * s),
    "subs": with_scalar(lambda x, s: torch.sub(x, s)),
    "divs": with_scalar(lambda x, s: x / s),
    "masked": with_scalar(lambda x, s: x.masked_fill(x > 0, s)),
    "mulinplace": with_scalar(lambda x, s: x.mul_(s)),
    "addout": with_scalar(lambda x, s: _out(lambda a, buf: torch.add(a, s, out=buf))(x)),
    # Scalars as keyword arguments (alpha, value, beta, min), which the counters read.
    "addalpha": with_scalar(lambda x, s: torch.add(x, x, alpha=s)),
    "subalpha": with_scalar(lambda x, s: torch.sub(x, 1, alpha=s)),
    "addcmul": with_scalar(lambda x, s: torch.addcmul(x, x, x, value=s)),
    "addmm": with_scalar(lambda x, s: torch.addmm(x, x, _weight(x, _last(x), _last(x)), beta=s, alpha=s)),
    "clamp": with_scalar(lambda x, s: x.clamp(min=s)),
    "relu": fixed(torch.relu),
    "sigmoid": fixed(torch.sigmoid),
    "threshold": fixed(lambda x: (x > 0).float()),
    "neg": fixed(lambda x: -x),
    "abs": fixed(torch.abs),
    "sum": fixed(lambda x: x.sum()),
    "sumlast": fixed(lambda x: x.sum(dim=-1)),
    "mean": fixed(lambda x: x.mean()),
    "amax": fixed(lambda x: x.amax(dim=-1)),
    "matmul": fixed(lambda x: x @ _weight(x, _last(x), 3).to(x.dtype)),
    "mm": fixed(lambda x: torch.mm(x, _weight(x, _last(x), 3))),
    "bmm": fixed(lambda x: torch.bmm(x, _weight(x, int(x.shape[0]), _last(x), 2))),
    "conv2d": fixed(lambda x: F.conv2d(x, _weight(x, 2, int(x.shape[1]) if x.dim() == 4 else 3, 3, 3), padding=1)),
    "linear": fixed(lambda x: F.linear(x, _weight(x, 3, _last(x)))),
    "maxpool": fixed(lambda x: F.max_pool2d(x, 2)),
    "softmax": fixed(lambda x: x.softmax(dim=-1)),
    "clone": fixed(torch.clone),
    "contiguous": fixed(lambda x: x.contiguous()),
    "detach": fixed(lambda x: x.detach()),
    "alias": fixed(lambda x: torch.ops.aten.alias(x)),
    "view": fixed(lambda x: x.view(-1)),
    "reshape": fixed(lambda x: x.reshape(-1)),
    "flatten": fixed(torch.flatten),
    "transpose": fixed(lambda x: x.transpose(0, -1)),
    "permute": fixed(lambda x: x.permute(*reversed(range(x.dim())))),
    "unsqueeze": fixed(lambda x: x.unsqueeze(0)),
    "to": _to_dtype,
    "index": fixed(_index),
    "cat": fixed(lambda x: torch.cat([x, x])),
    "zeroinplace": fixed(lambda x: x.zero_()),
    "mulout": fixed(_out(lambda x, buf: torch.mul(x, x, out=buf))),
    "sumout": fixed(_out(lambda x, buf: torch.sum(x, dim=-1, out=buf))),
    "todense": fixed(lambda x: x.to_dense()),
    "dequantize": fixed(lambda x: x.dequantize()),
    "resolveneg": fixed(lambda x: x.resolve_neg()),
    "resolveconj": fixed(lambda x: x.resolve_conj()),
    "backward": fixed(_backward),
    # Shrunk storages only: the part the storage still holds, read (storage_freed.py's `held`).
    "heldpart": fixed(lambda x: x.reshape(-1)[:10] * 2 if x.is_contiguous() else x.detach()),
}
# A kind's own way back to an ordinary tensor: drawn first a quarter of the time.
NATURAL = {"sparsecoo": "todense", "sparsecsr": "todense", "quantized": "dequantize", "negview": "resolveneg",
           "conj": "resolveconj", "leaf": "backward", "parameter": "backward", "nestedstrided": "todense"}
# A freed storage holds nothing: plain torch itself reads freed memory on any op that reads, so
# these kinds get views only (a shrunk storage also its held part).
VIEWS_ONLY = {"freed": ["detach", "alias", "view", "transpose", "permute", "unsqueeze"],
              "shrunk": ["detach", "alias", "view", "transpose", "permute", "unsqueeze", "heldpart"]}


def draw(index: int):
    c = Case(index)
    kind = c.r.choice(list(KINDS))
    if kind == "channelslast" and len(c.size) != 4:
        c.size = (2, 3, 4, 5)
    pool = VIEWS_ONLY.get(kind, [name for name in OPS if name != "heldpart"])
    length = c.r.choice([1, 1, 2, 2, 3])
    names = [c.r.choice(pool) for _ in range(length)]
    if kind in NATURAL and c.r.random() < 0.25:
        names[0] = NATURAL[kind]
    ops = [OPS[name](c, name) for name in names]
    suspended = c.r.random() < 0.3  # built where the capture does not see it: first seen as an op's input
    size = "" if kind in FIXED_SHAPES else "x".join(str(n) for n in c.size)
    key = f"case_{index:03d}_{kind}{size}{'_unseen' if suspended else ''}_" + "_".join(label for label, _ in ops)
    return c, kind, ops, suspended, key


def describe(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


# -- what the user sees of a tensor ----------------------------------------------------------------

def attempt(fn):
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - a fact torch refuses is a fact too
        return describe(exc)


def readable(t) -> bool:
    """Whether the storage holds every element the view reaches (a freed one holds none)."""
    if t.is_meta or t.is_nested or t.layout is not torch.strided or t.numel() == 0:
        return True
    extent = t.storage_offset() + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride())) + 1
    return t.untyped_storage().nbytes() >= extent * t.element_size()


def seen(value, source=None, own=False):
    """What the user sees of a value; `source`: the case's input, for a result; `own`: the input."""
    if isinstance(value, (list, tuple)):
        return [seen(item, source) for item in value]
    if not isinstance(value, torch.Tensor):
        return value
    facts = {
        "type": type(value).__name__,
        "dtype": str(value.dtype),
        "layout": str(value.layout),
        "device": str(value.device),
        "shape": attempt(lambda: tuple(int(s) for s in value.shape)),
        "stride": attempt(lambda: tuple(value.stride())) if value.layout is torch.strided else None,
        "requires_grad": value.requires_grad,
        "is_leaf": value.is_leaf,
        "grad_fn": type(value.grad_fn).__name__ if value.grad_fn is not None else None,
        "conj": attempt(value.is_conj),
        "neg": attempt(value.is_neg),
        "inference": attempt(value.is_inference),
    }
    if source is not None and value.layout is torch.strided and not value.is_nested and not value.is_meta:
        facts["aliases_input"] = attempt(
            lambda: value.untyped_storage().data_ptr() == source.untyped_storage().data_ptr())
    # The version counter of the user's tensor and of its views (what an in-place write bumps).
    # A fresh tensor's counter depends on the kernel path torch takes: under any
    # TorchDispatchMode, a reduction of an inference tensor and a Parameter's grad through
    # index's backward have version 0, plainly version 1.
    if own or facts.get("aliases_input") is True:
        facts["version"] = attempt(lambda: value._version)
    if value.is_nested:
        facts["values"] = attempt(lambda: [row.detach().clone() for row in value.unbind()])
    elif readable(value):
        facts["values"] = value
    else:
        facts["values"] = ("unreadable", value.untyped_storage().nbytes())
    return facts


def outcome(kept: dict) -> dict:
    made = kept.get("input")
    out = {"log": kept["log"]}
    out["result" if "error" not in kept else "error"] = (
        kept["error"] if "error" in kept else seen(kept["result"], made if isinstance(made, torch.Tensor) else None))
    if isinstance(made, torch.Tensor):
        out["input"] = seen(made, own=True)
        out["grad"] = seen(made.grad) if made.is_leaf else None
    return out


indices = range(CASES) if ONLY is None else [int(i) for i in ONLY.split(",") if i.strip()]
cases = {}
torch.manual_seed(SEED)
with recording(**OPTIONS) as rec:
    for index in indices:
        c, kind, ops, suspended, key = draw(index)
        if kind in SKIP:
            continue
        print(key, file=sys.stderr, flush=True)
        kept = {}
        log.clear()
        with rec.stage(f"forward_case{index:03d}"):
            try:
                if suspended:
                    with rec.suspend():
                        kept["input"] = value = KINDS[kind](c)
                else:
                    kept["input"] = value = KINDS[kind](c)
                for _, op in ops:
                    value = op(value)
                kept["result"] = value
            except Exception as exc:  # noqa: BLE001 - the user's code caught it; both runs must agree
                kept["error"] = describe(exc)
        kept["log"] = list(log)
        cases[key] = kept
report(**{key: outcome(kept) for key, kept in cases.items()})
