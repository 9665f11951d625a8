"""The trace's running numbers (the context's seq, the registry's next tensor id and uid).

A counter is taken (`take()`: its value, which is then one more) and read or set through
`value`. The compiled record takes them in C (capture/native/record/counter.c), an increment
instead of reading an int attribute and setting the next one back; without the extension,
`PythonCounter` does the same in Python (one the compiled record meets it takes through `take`
and `value`, two of the names its ATTRIBUTE_READS lists).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from spiketrace.capture.native import _native


class Counter(Protocol):
    """What every counter offers: PythonCounter's, or the compiled one's."""

    value: int

    def take(self) -> int: ...


class PythonCounter:
    __slots__ = ("value",)

    def __init__(self, value: int = 0) -> None:
        self.value = value

    def take(self) -> int:
        value = self.value
        self.value = value + 1
        return value

    def __repr__(self) -> str:
        return f"Counter({self.value})"


new_counter: Callable[..., Counter] = _native.Counter if _native is not None else PythonCounter
