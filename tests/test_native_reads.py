"""How the compiled record reads a tensor's attributes and takes the trace's counters.

capture/native/record/attrs.c calls torch's getters directly, found once per tensor type: what it
reads must be what getattr gives, for every kind of tensor, and must follow a type whose
attributes change after the getters were found. capture/native/record/counter.c's Counter must
count as the Python counter it replaces does, and the context's `seq` read and set through it.
"""

from __future__ import annotations

import pytest
import torch

import spiketrace.capture.native
from spiketrace.capture.context import RecordingContext
from spiketrace.capture.native.counters import PythonCounter, new_counter

native = spiketrace.capture.native._native
pytestmark = pytest.mark.skipif(native is None, reason="the extension is not built")

NAMES = ("_version", "shape", "requires_grad", "dtype", "device", "is_cpu", "layout", "is_meta")


def _tensors():
    base = torch.arange(12.0).reshape(3, 4)
    base.add_(1)  # a version above 0 (its view shares it)
    with torch.inference_mode():
        inference = torch.ones(2)
    return {
        "plain": base,
        "view": base.t()[1:],
        "grad": torch.zeros(2, 2, requires_grad=True) * 2,
        "parameter": torch.nn.Parameter(torch.ones(3)),
        "bool": torch.ones(5, dtype=torch.bool),
        "meta": torch.empty(2, 3, device="meta"),
        "sparse": torch.eye(3).to_sparse(),
        "inference": inference,
    }


@pytest.mark.parametrize("kind", list(_tensors()))
def test_the_compiled_reads_are_getattrs(kind):
    t = _tensors()[kind]
    if kind == "inference":  # no version counter: getattr raises, and so does the compiled read
        with pytest.raises(RuntimeError):
            _ = t._version
        with pytest.raises(RuntimeError):
            native.tensor_attributes(t)
        return
    assert native.tensor_attributes(t) == tuple(getattr(t, name) for name in NAMES)


def test_a_type_changed_after_its_getters_were_found_is_read_as_it_is_now():
    class Tagged(torch.Tensor):
        pass

    t = torch.Tensor._make_subclass(Tagged, torch.zeros(2, 3))
    assert native.tensor_attributes(t)[1] == (2, 3)  # the getters of Tagged found and kept
    Tagged.shape = property(lambda self: "overridden")  # the type's version tag changes
    try:
        assert native.tensor_attributes(t)[1] == "overridden" == t.shape
    finally:
        del Tagged.shape
    assert native.tensor_attributes(t)[1] == (2, 3)


def test_a_type_with_its_own_attribute_lookup_is_read_through_it():
    class Logged(torch.Tensor):
        reads = []

        def __getattribute__(self, name):
            Logged.reads.append(name)
            return super().__getattribute__(name)

    t = torch.Tensor._make_subclass(Logged, torch.zeros(4))
    values = native.tensor_attributes(t)
    # every read went through __getattribute__ (torch's getters read more names of a subclass)
    assert [name for name in Logged.reads if name in NAMES] == list(NAMES)
    assert values[1] == (4,)


@pytest.mark.parametrize("counter_type", [native.Counter if native else None, PythonCounter])
def test_a_counter_gives_each_number_once(counter_type):
    counter = counter_type()
    assert [counter.take() for _ in range(3)] == [0, 1, 2] and counter.value == 3
    counter.value = 2**40  # past 32 bits: a long run's seq
    assert counter.take() == 2**40 and counter.value == 2**40 + 1
    assert repr(counter) == f"Counter({2**40 + 1})"
    assert counter_type(7).take() == 7


def test_the_context_seq_is_its_counter():
    context = RecordingContext(writer=None, catalog=None)
    assert type(context.seq_counter) is new_counter
    context.seq = 5
    assert context.take_seq() == 5 and context.seq == context.peek_seq() == 6
    assert context.steps_recorded == {0}
