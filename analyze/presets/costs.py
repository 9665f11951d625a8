"""What a model's `Costs` (its per-operation figures, from a preset's flat parameters) share:
every figure finite and nonnegative (None: not a term of the preset), and `from_values`, which
refuses a key the model does not know, or lacks one it needs, naming it.

    @dataclass(frozen=True)
    class Costs(FlatCosts):
        MODEL: ClassVar[str] = "paper"
        UNITS: ClassVar[Mapping[str, str]] = PRESET_UNITS
        e_mac_pj: float = 4.6
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any, ClassVar, Self


class FlatCosts:
    """A mixin for a frozen dataclass of a model's figures."""

    MODEL: ClassVar[str]
    UNITS: ClassVar[Mapping[str, str]]  # key -> unit: the keys a preset may give
    REQUIRED: ClassVar[tuple[str, ...]] = ()  # the keys a preset must give

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():  # type: ignore[call-overload]  # a dataclass, as every subclass is
            if value is not None and (not math.isfinite(value) or value < 0):
                raise ValueError(f"{name} must be finite and nonnegative, got {value}")

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> Self:
        unknown = sorted(set(values) - set(cls.UNITS))
        if unknown:
            raise ValueError(f"unknown key {unknown[0]!r} for the {cls.MODEL} model (known: {', '.join(cls.UNITS)})")
        missing = [key for key in cls.REQUIRED if key not in values]
        if missing:
            raise ValueError(f"the {cls.MODEL} model needs {missing[0]}")
        return cls(**{k: float(v) for k, v in values.items()})
