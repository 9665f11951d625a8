"""The module catalog: one `modules` row per nn.Module seen, with the facts analyses key on.

Class MROs are stored as qualified names, so the analysis recognises SpikingJelly BaseNode
subclasses, snnTorch or Norse neurons without importing them (analyze/neurons.py). Attributes
are the module's simple values (numbers, strings, tuples, dtypes) plus what neuron libraries
keep elsewhere:
* properties behind getters (SpikingJelly's step_mode, v_threshold, ...; snnTorch's
  reset_mechanism);
* a few well-known neuron parameters kept as tensors (snnTorch's beta, alpha, threshold,
  graded_spikes_factor, V): their value when the module was first seen, a number for a
  one-element tensor, a list for a small one, else {"$tensor": shape};
* a parameter namedtuple (Norse's `p`: tau_mem_inv, v_th, v_reset, ...) as a dict of its fields,
  tensors as above.
A callable attribute such as a surrogate function is stored as its class plus its own simple
attributes, a function also by its qualified name ("$function"; Norse's reset_method).
"""

from __future__ import annotations

import json
import math
import types
from collections.abc import Callable
from typing import Any

import torch

from spiketrace.capture.store.table_buffer import TableBuffer
from spiketrace.capture.tensors.nested import sizes
from spiketrace.capture.tensors.registry import excluded_from_modes

# Properties neuron libraries expose through getters rather than instance attributes.
_PROPERTY_ATTRIBUTES = ("step_mode", "v_threshold", "v_reset", "tau", "decay_input", "detach_reset", "backend",
                        "store_v_seq", "reset_mechanism")
# Neuron parameters snnTorch keeps as buffers or parameters (tensors): stored by value.
_TENSOR_ATTRIBUTES = ("beta", "alpha", "threshold", "graded_spikes_factor", "V")
_LARGEST_TENSOR_VALUE = 16  # elements; a larger tensor is stored as its shape
# Private attributes that rules need (SpikingJelly's NMAC pads with it).
_PRIVATE_ATTRIBUTES = ("_reversed_padding_repeated_twice",)


def qualified_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _simple(value, depth: int = 0):
    """JSON form of a simple value, or NotImplemented when it is not simple."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$float": repr(value)}
    if isinstance(value, (tuple, list)) and depth < 2:
        items = [_simple(v, depth + 1) for v in value]
        return NotImplemented if any(i is NotImplemented for i in items) else items
    if isinstance(value, (torch.dtype, torch.device)):
        return str(value)
    return NotImplemented


def _tensor_value(tensor: torch.Tensor):
    """A small tensor's value (a number, or a list), else its shape; read once per module."""
    # a module first seen inside a hook: no dispatch mode may see these reads
    with excluded_from_modes():
        shape, numel = sizes(tensor)  # a nested tensor's: null at its ragged dimension
        if tensor.is_meta or tensor.is_sparse or tensor.is_nested or numel > _LARGEST_TENSOR_VALUE:
            return {"$tensor": list(shape)}
        values = tensor.detach().reshape(-1).tolist()
    simple = _simple(values[0] if numel == 1 else values)
    return {"$tensor": list(shape)} if simple is NotImplemented else simple


def _describe_parameters(value) -> dict:
    """A parameter namedtuple (Norse's LIFParameters): its fields, tensors by value."""
    described: dict[str, Any] = {"$class": qualified_name(type(value))}
    for key in value._fields:
        field = getattr(value, key)
        if isinstance(field, torch.Tensor):
            described[key] = _tensor_value(field)
        elif (simple := _simple(field)) is not NotImplemented:
            described[key] = simple
        elif callable(field):
            described[key] = _describe_object(field)
    return described


def _function_name(value) -> str | None:
    module, name = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    return f"{module}.{name}" if isinstance(module, str) and isinstance(name, str) else None


def _describe_object(value) -> dict:
    described: dict[str, Any] = {"$class": qualified_name(type(value))}
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, types.MethodType)):
        name = _function_name(value)
        if name is not None:
            described["$function"] = name
    for key, attr in vars(value).items() if hasattr(value, "__dict__") else ():
        if not key.startswith("_") and not isinstance(attr, torch.nn.Module):
            simple = _simple(attr)
            if simple is not NotImplemented:
                described[key] = simple
    return described


def module_attributes(module: torch.nn.Module) -> dict:
    attributes: dict[str, Any] = {}
    for key, value in vars(module).items():
        if key.startswith("_") and key not in _PRIVATE_ATTRIBUTES:
            continue
        if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple, by field name
            attributes[key] = _describe_parameters(value)
        elif (simple := _simple(value)) is not NotImplemented:
            attributes[key] = simple
        elif callable(value) and not isinstance(value, torch.Tensor):
            attributes[key] = _describe_object(value)
    for key in _TENSOR_ATTRIBUTES:
        try:
            value = getattr(module, key, None)
            if key not in attributes and isinstance(value, torch.Tensor):
                attributes[key] = _tensor_value(value)
        except Exception:  # noqa: BLE001 - a getter or a tensor whose values cannot be read here
            continue
    for key in _PROPERTY_ATTRIBUTES:
        if key not in attributes and hasattr(type(module), key):
            try:
                simple = _simple(getattr(module, key))
            except Exception:  # noqa: BLE001 - a getter that needs state we do not have
                continue
            if simple is not NotImplemented:
                attributes[key] = simple
    memories = getattr(module, "_memories", None)
    if isinstance(memories, dict):
        attributes["$memories"] = list(memories)
    return attributes


def _tensor_list(named) -> str:
    described = []
    with excluded_from_modes():  # a module first seen inside a hook: no dispatch mode may see a nested one's reads
        for name, t in named:
            if t is not None:
                shape, numel = sizes(t)  # a nested tensor's: null at its ragged dimension
                described.append({"name": name, "shape": list(shape), "dtype": str(t.dtype).removeprefix("torch."),
                                  "requires_grad": bool(t.requires_grad), "numel": numel})
    return json.dumps(described)


class ModuleCatalog:
    """Assigns module ids. Rows are written at the next flush, when the tracker has named them."""

    def __init__(self, rows: TableBuffer, report: Callable[[str, BaseException], None] | None = None) -> None:
        self.rows = rows
        self.report = report  # (what, error) of a module that could not be described: `degraded`
        self.ids: dict[int, int] = {}
        self.modules: list[torch.nn.Module] = []  # strong refs keep ids unique while recording
        self.static_paths: dict[str, int] = {}
        self.stateful: set[int] = set()  # module ids with SpikingJelly-style _memories
        self.tracker_names: dict[int, str] = {}
        self._unwritten: dict[int, dict] = {}

    def bind_model(self, model: torch.nn.Module) -> dict[int, str]:
        """Register the model's modules under their static names; return id(param) -> name."""
        root = type(model).__name__
        parameter_names: dict[int, str] = {}
        for name, module in model.named_modules():
            path = f"{root}.{name}" if name else root
            parent_id = self.static_paths.get(path.rsplit(".", 1)[0]) if name else None
            self.static_paths[path] = self.module_id(module, path=path, parent_id=parent_id)
            for param_name, parameter in module.named_parameters(recurse=False):
                parameter_names.setdefault(id(parameter), f"{path}.{param_name}")
        return parameter_names

    def module_id(self, module, tracker_name: str | None = None, path: str | None = None, parent_id=None) -> int:
        found = self.ids.get(id(module))
        if found is not None:
            if tracker_name is not None:
                self.tracker_names.setdefault(found, tracker_name)
            return found
        module_id = len(self.modules)
        self.ids[id(module)] = module_id
        self.modules.append(module)
        if tracker_name is not None:
            self.tracker_names[module_id] = tracker_name
        cls = type(module)
        if isinstance(getattr(module, "_memories", None), dict):
            self.stateful.add(module_id)
        self._unwritten[module_id] = dict(
            module_id=module_id,
            path=path if path is not None else (tracker_name or cls.__name__),
            in_model=path is not None,
            parent_id=parent_id,
            class_name=cls.__qualname__,
            class_module=cls.__module__,
            mro=[qualified_name(c) for c in cls.__mro__],
            attributes=self._described(cls, "attributes", lambda: json.dumps(module_attributes(module), default=repr), "{}"),
            parameters=self._described(cls, "parameters", lambda: _tensor_list(module.named_parameters(recurse=False)), "[]"),
            buffers=self._described(cls, "buffers", lambda: _tensor_list(module.named_buffers(recurse=False)), "[]"),
            is_leaf=next(module.children(), None) is None,
        )
        return module_id

    def _described(self, cls: type, what: str, describe: Callable[[], str], fallback: str) -> str:
        """A module's description, or `fallback` (reported per class and field) where the
        module refuses it: capture is a guest, so a module it cannot describe is still recorded
        and the user's Recorder(model=...) never raises for it."""
        try:
            return describe()
        except Exception as exc:  # noqa: BLE001 - the user's module, any error
            if self.report is not None:
                self.report(f"{qualified_name(cls)} {what}", exc)
            return fallback

    def write_rows(self, _writer=None) -> None:
        """Write the rows of modules not written yet (a before-flush hook)."""
        for module_id, row in self._unwritten.items():
            self.rows.append(tracker_name=self.tracker_names.get(module_id), **row)
        self._unwritten.clear()
