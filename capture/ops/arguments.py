"""Encoding an op's non-tensor arguments faithfully as JSON, with tensors replaced by references.

Ints, bools, None, strings and lists stay as they are; values JSON cannot hold exactly are
tagged objects: {"$float": "inf"}, {"$dtype": "float32"}, {"$device": "cuda:0"},
{"$memory_format": "channels_last"}, {"$layout": "strided"}, {"$complex": [re, im]},
{"$script_object": "__torch__...."}, and a size that is no int as its expression: {"$symint": "j1"}
(a jagged nested tensor's ragged size, a symbolic one), {"$symfloat": ...}, {"$symbool": ...}.
Tuples and lists both become JSON lists, as the dispatcher treats them alike. A tensor becomes
{"$t": k}, k being its index among the op's tensors (event_tensors.k). Anything else is
{"$repr": repr(value)} so nothing is silently dropped.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import torch

_dumps = json.JSONEncoder(separators=(",", ":"), allow_nan=False, ensure_ascii=False).encode

_TAGGED_TYPES: dict[type, tuple[str, Callable[[Any], str]]] = {
    torch.dtype: ("$dtype", lambda v: str(v).removeprefix("torch.")),
    torch.device: ("$device", str),
    torch.memory_format: ("$memory_format", lambda v: str(v).removeprefix("torch.")),
    torch.layout: ("$layout", lambda v: str(v).removeprefix("torch.")),
}

# A SymInt, SymFloat or SymBool is written as its expression, never converted: int() of a
# nested int (`j1`) raises, and of a symbolic size it would guard, specializing the user's
# graph. Apart from _TAGGED_TYPES, whose types the compiled record keys kwargs by
# (native_record.py): a symbolic SymInt is unhashable.
_SYMBOLIC_TYPES = {torch.SymInt: "$symint", torch.SymFloat: "$symfloat", torch.SymBool: "$symbool"}


_slots: dict[tuple, tuple] = {}


def use_slot(role: str, position, name, item) -> tuple:
    """The interned (role, position, name, item) of a tensor's place in a call: one object per
    distinct place, which the event_tensors buffer holds per row."""
    slot = (role, position, name, item)
    if len(_slots) > 65536:
        _slots.clear()
    return _slots.setdefault(slot, slot)


_ARG_SLOTS = [use_slot("arg", i, None, None) for i in range(32)]
_OUT_SLOT = use_slot("out", 0, None, None)


class TensorCollector:
    """Collects (tensor, slot) in the order their placeholders appear; a slot is the interned
    (role, position, name, item) of use_slot."""

    __slots__ = ("tensors",)

    def __init__(self, tensors: list | None = None) -> None:
        self.tensors: list[tuple[torch.Tensor, tuple]] = [] if tensors is None else tensors

    def add(self, t: torch.Tensor, role: str, position, name, item) -> dict:
        self.tensors.append((t, use_slot(role, position, name, item)))
        return {"$t": len(self.tensors) - 1}


def _encode(value, collector: TensorCollector | None, role: str, position, name, item):
    if value is None or value is True or value is False or type(value) in (int, str):
        return value
    if isinstance(value, torch.Tensor):
        assert collector is not None, "a tensor where the caller promised none"
        return collector.add(value, role, position, name, item)
    if type(value) is float:
        return value if math.isfinite(value) else {"$float": repr(value)}
    if isinstance(value, (list, tuple)):
        # Items of a list argument are numbered by their flattened position in it.
        encoded = []
        for index, element in enumerate(value):
            encoded.append(_encode(element, collector, role, position, name, index if item is None else item))
        return encoded
    tag = _TAGGED_TYPES.get(type(value))
    if tag is not None:
        return {tag[0]: tag[1](value)}
    symbolic = _SYMBOLIC_TYPES.get(type(value))
    if symbolic is not None:
        return {symbolic: str(value)}
    if isinstance(value, (int, float)):  # int and float subclasses (numpy.float64; no SymInt, above)
        return _encode(int(value) if isinstance(value, int) else float(value), collector, role, position, name, item)
    if isinstance(value, complex):
        return {"$complex": [value.real, value.imag]}
    if isinstance(value, torch.ScriptObject):  # e.g. the profiler's _RecordFunction handle
        return {"$script_object": value._type().qualified_name()}
    return {"$repr": repr(value)}


class _TensorSlot:
    """Marks where a tensor stood in an interning key (a unique, hashable object)."""

    __slots__ = ()


_TENSOR = _TensorSlot()
_FLOAT = _TensorSlot()  # heads a finite float's key: (_FLOAT, value, sign)
_INTS = _TensorSlot()  # heads a list or tuple of ints' key: (_INTS, *items)
_BOOL = _TensorSlot()  # heads a bool's key: (_BOOL, value), so True never meets 1 (equal as keys);
# a non-empty list of bools is (_BOOL, tuple of them), whose JSON is the list
_TENSORS = _TensorSlot()  # heads a list of tensors' key: (_TENSORS, length)
_SEQUENCES = (list, tuple)  # both are JSON lists, as the dispatcher treats them alike
_copysign = math.copysign
_INTERNED_LIMIT = 65536
# (args key) -> args JSON, for calls without keyword arguments whose positional arguments
# are all tensors, ints, None, finite floats, lists of ints, bools or tensors (nearly every
# op): the same JSON string object every time the same structure recurs, instead of an
# encoder pass per op. Ints are compared with their type (`type(a) is int`), so True never
# meets 1; a float's key carries its sign (0.0 == -0.0 as keys, not as JSON) and a marker, so
# 2.0 never meets 2; infinities and NaN (tagged objects in the JSON) take the encoder.
_interned_args: dict[tuple, str] = {}
_interned_strings: dict[str, str] = {}
# The JSON of a single tensor output, by its placeholder index.
_OUT_TENSOR = [f'{{"$t":{k}}}' for k in range(64)]


def _intern(text: str) -> str:
    if len(_interned_strings) > _INTERNED_LIMIT:
        _interned_strings.clear()
    return _interned_strings.setdefault(text, text)


def _placeholders_json(key: tuple) -> str:
    placeholders: list[Any] = []
    k = 0
    for value in key:
        if value is _TENSOR:
            placeholders.append({"$t": k})
            k += 1
        elif type(value) is tuple and value[0] is _FLOAT:
            placeholders.append(value[1])
        elif type(value) is tuple and value[0] is _BOOL:
            placeholders.append(value[1])
        elif type(value) is tuple and value[0] is _INTS:
            placeholders.append(list(value[1:]))
        elif type(value) is tuple and value[0] is _TENSORS:
            placeholders.append([{"$t": k + item} for item in range(value[1])])
            k += value[1]
        else:
            placeholders.append(value)
    return _dumps(placeholders)


# (keyword arguments' key) -> their JSON, for the compiled record (capture/native/record/call.c
# kwargs_key): keyword arguments that hold no tensor, encoded once per distinct key.
_interned_kwargs: dict[tuple, str] = {}


def kwargs_json(kwargs: dict) -> str:
    """The JSON of keyword arguments holding no tensor, as encode_call writes it."""
    return _intern(_dumps({key: _encode(v, None, "kwarg", None, key, None) for key, v in kwargs.items()}))


def encode_call(args: tuple, kwargs: dict, out, intern: bool = True) -> tuple[str, str, str, list]:
    """JSON of args, kwargs and out, plus the tensors they reference, in placeholder order.

    With `intern` (the fast path interned_arguments), equal argument structures share one JSON string
    object and skip the encoder; the JSON is the same either way."""
    tensors: list = []
    args_json = None
    if intern and not kwargs:
        key: list[Any] = []
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor):
                tensors.append((a, _ARG_SLOTS[i] if i < 32 else use_slot("arg", i, None, None)))
                key.append(_TENSOR)
            elif type(a) is int or a is None:
                key.append(a)
            elif type(a) is float and a - a == 0.0:  # finite: inf - inf and nan - nan are nan
                key.append((_FLOAT, a, _copysign(1.0, a)))  # the sign keeps -0.0 apart from 0.0
            elif type(a) in _SEQUENCES and all(type(e) is int for e in a):
                key.append((_INTS, *a))
            elif type(a) is bool:  # keepdim, half_to_float, ...
                key.append((_BOOL, a))
            elif type(a) in _SEQUENCES and a and all(type(e) is bool for e in a):  # output_mask
                key.append((_BOOL, tuple(a)))  # its JSON: the list of bools
            elif type(a) in _SEQUENCES and a and all(isinstance(e, torch.Tensor) for e in a):  # cat, stack
                tensors.extend((e, use_slot("arg", i, None, item)) for item, e in enumerate(a))
                key.append((_TENSORS, len(a)))
            else:
                del tensors[:]
                break
        else:
            args_key = tuple(key)
            args_json = _interned_args.get(args_key)
            if args_json is None:
                if len(_interned_args) > _INTERNED_LIMIT:
                    _interned_args.clear()
                args_json = _interned_args[args_key] = _placeholders_json(args_key)
    if args_json is None:
        args_json = _encode_args(args, tensors)
        if intern:
            args_json = _intern(args_json)
    collector = TensorCollector(tensors) if kwargs or not isinstance(out, torch.Tensor) else None
    if kwargs:
        kwargs_json = _dumps({key: _encode(v, collector, "kwarg", None, key, None) for key, v in kwargs.items()})
        if intern:
            kwargs_json = _intern(kwargs_json)
    else:
        kwargs_json = "{}"
    if isinstance(out, torch.Tensor):  # the common case, without the encoder
        tensors.append((out, _OUT_SLOT))
        k = len(tensors) - 1
        out_json = _OUT_TENSOR[k] if k < len(_OUT_TENSOR) else f'{{"$t":{k}}}'
    else:
        if isinstance(out, (tuple, list)):
            out_json = _dumps([_encode(o, collector, "out", i, None, None) for i, o in enumerate(out)])
        else:
            out_json = _dumps(_encode(out, collector, "out", 0, None, None))
        if intern:
            out_json = _intern(out_json)
    return args_json, kwargs_json, out_json, tensors


def out_list_json(key: int) -> str:
    """The out JSON encode_call writes for a tuple or list of tensors and Nones, for the compiled
    record (capture/native/record/call.c): `key` packs the first tensor's placeholder index (bits
    0-7), the item count (8-15) and which items are tensors (a bit each from 16)."""
    first, count, present = key & 0xFF, (key >> 8) & 0xFF, key >> 16
    items: list[dict[str, int] | None] = []
    k = first
    for i in range(count):
        if present >> i & 1:
            items.append({"$t": k})
            k += 1
        else:
            items.append(None)
    return _intern(_dumps(items))


def _encode_args(args: tuple, tensors: list) -> str:
    collector = TensorCollector(tensors)
    encoded_args: list[Any] = []
    for i, a in enumerate(args):  # tensors and ints first: most arguments are one of them
        if isinstance(a, torch.Tensor):
            tensors.append((a, _ARG_SLOTS[i] if i < 32 else use_slot("arg", i, None, None)))
            encoded_args.append({"$t": len(tensors) - 1})
        elif type(a) is int or a is None:
            encoded_args.append(a)
        else:
            encoded_args.append(_encode(a, collector, "arg", i, None, None))
    return _dumps(encoded_args)
