"""The module catalog: one `modules` row per nn.Module seen, with the facts analyses key on.

Class MROs are stored as qualified names, so the analysis recognises SpikingJelly BaseNode
subclasses, snnTorch or Norse neurons without importing them. Attributes are the module's
simple values (numbers, strings, tuples, dtypes) plus a few well-known properties that
neuron libraries keep behind getters (step_mode, v_threshold, ...). A callable attribute
such as a surrogate function is stored as its class plus its own simple attributes.
"""

from __future__ import annotations

import json
import math

import torch

from capture.table_buffer import TableBuffer

# Properties neuron libraries expose through getters rather than instance attributes.
_PROPERTY_ATTRIBUTES = ("step_mode", "v_threshold", "v_reset", "tau", "decay_input", "detach_reset", "backend", "store_v_seq")
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


def _describe_object(value) -> dict:
    described = {"$class": qualified_name(type(value))}
    for key, attr in vars(value).items() if hasattr(value, "__dict__") else ():
        if not key.startswith("_") and not isinstance(attr, torch.nn.Module):
            simple = _simple(attr)
            if simple is not NotImplemented:
                described[key] = simple
    return described


def module_attributes(module: torch.nn.Module) -> dict:
    attributes = {}
    for key, value in vars(module).items():
        if key.startswith("_") and key not in _PRIVATE_ATTRIBUTES:
            continue
        simple = _simple(value)
        if simple is not NotImplemented:
            attributes[key] = simple
        elif callable(value) and not isinstance(value, torch.Tensor):
            attributes[key] = _describe_object(value)
    for key in _PROPERTY_ATTRIBUTES:
        if key not in attributes and hasattr(type(module), key):
            try:
                simple = _simple(getattr(module, key))
            except Exception:  # a getter that needs state we do not have
                continue
            if simple is not NotImplemented:
                attributes[key] = simple
    memories = getattr(module, "_memories", None)
    if isinstance(memories, dict):
        attributes["$memories"] = list(memories)
    return attributes


def _tensor_list(named) -> str:
    return json.dumps(
        [
            {
                "name": name,
                "shape": list(t.shape),
                "dtype": str(t.dtype).removeprefix("torch."),
                "requires_grad": bool(t.requires_grad),
                "numel": t.numel(),
            }
            for name, t in named
            if t is not None
        ]
    )


class ModuleCatalog:
    """Assigns module ids. Rows are written at the next flush, when the tracker has named them."""

    def __init__(self, rows: TableBuffer) -> None:
        self.rows = rows
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
            attributes=json.dumps(module_attributes(module), default=repr),
            parameters=_tensor_list(module.named_parameters(recurse=False)),
            buffers=_tensor_list(module.named_buffers(recurse=False)),
            is_leaf=next(module.children(), None) is None,
        )
        return module_id

    def write_rows(self, _writer=None) -> None:
        """Write the rows of modules not written yet (a before-flush hook)."""
        for module_id, row in self._unwritten.items():
            self.rows.append(tracker_name=self.tracker_names.get(module_id), **row)
        self._unwritten.clear()
