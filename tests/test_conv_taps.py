"""conv_taps must reproduce SpikingJelly 2.0.0's spike-conv counts exactly, without a conv."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from spikingjelly.activation_based.op_counter.ac import _spike_convolution
from spikingjelly.activation_based.op_counter.neuromorphic_memory_access import (
    _spike_conv_weight_uses_from_tensors,
)
from torch.utils._python_dispatch import TorchDispatchMode

from spiketrace.capture.ops.conv_taps import (
    conv_both_binary_sum,
    conv_spike_taps,
    coverage_map,
    coverage_vector,
    spikingjelly_conv_value,
)

aten = torch.ops.aten


@st.composite
def conv_cases(draw, transposed: bool, uniform: bool = False):
    """A valid aten.convolution geometry plus a binary input; sizes kept small for speed.
    `uniform`: the same kernel size, stride, padding, dilation and output padding in every
    dim (what a one-element list or an int argument means)."""
    ndim = draw(st.integers(1, 3))
    groups = draw(st.sampled_from([1, 2, 3, 4]))
    c_in = groups * draw(st.integers(1, 2))
    c_out = groups * draw(st.integers(1, 2))
    kernel, stride, padding, dilation, outpad, spatial = [], [], [], [], [], []
    max_extra = {1: 6, 2: 4, 3: 2}[ndim]
    for dim in range(ndim):
        k, s, d = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
        p = draw(st.integers(0, 3))
        op = draw(st.integers(0, max(s, d) - 1)) if transposed else 0
        if uniform and dim:
            k, s, d, p, op = kernel[0], stride[0], dilation[0], padding[0], outpad[0]
        if transposed:
            # need (I-1)s - 2p + d(K-1) + op + 1 >= 1
            i_min = max(1, math.ceil((2 * p - d * (k - 1) - op) / s) + 1)
        else:
            # need I + 2p - d(K-1) - 1 >= 0
            i_min = max(1, d * (k - 1) + 1 - 2 * p)
        spatial.append(draw(st.integers(i_min, i_min + max_extra)))
        kernel.append(k), stride.append(s), padding.append(p), dilation.append(d)
        outpad.append(op)
    batch = draw(st.integers(1, 3))
    density = draw(st.one_of(st.sampled_from([0.0, 1.0]), st.floats(0.0, 1.0)))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    x = torch.rand((batch, c_in, *spatial), generator=gen) < density
    if draw(st.booleans()):
        x = x.float()
    w_shape = (c_in, c_out // groups, *kernel) if transposed else (c_out, c_in // groups, *kernel)
    return dict(x=x, w_shape=w_shape, stride=stride, padding=padding, dilation=dilation,
                outpad=outpad, groups=groups, gen=gen)


def _our_value(case, transposed):
    taps = conv_spike_taps(case["x"], case["w_shape"], case["stride"], case["padding"],
                           case["dilation"], transposed, case["outpad"], case["groups"])
    assert taps.dim() == 0 and taps.dtype == torch.float64 and taps.device == case["x"].device
    return spikingjelly_conv_value(int(taps.item()), case["w_shape"], transposed, case["groups"])


def _aten_args(x, w, case, transposed):
    return (x, w, None, case["stride"], case["padding"], case["dilation"], transposed,
            case["outpad"], case["groups"])


@settings(max_examples=150, deadline=None)
@given(conv_cases(transposed=False))
def test_normal_conv_matches_spikingjelly(case):
    w = torch.rand(case["w_shape"], generator=case["gen"])
    expected = _spike_conv_weight_uses_from_tensors(
        case["x"], w, case["stride"], case["padding"], case["dilation"], case["groups"])
    assert _our_value(case, False) == expected


@settings(max_examples=150, deadline=None)
@given(conv_cases(transposed=True))
def test_transposed_conv_matches_spikingjelly(case):
    # Values in (0.25, 0.75) are never 0/1, so SJ takes its binary-x / dense-w branch.
    w = torch.rand(case["w_shape"], generator=case["gen"]) * 0.5 + 0.25
    x = case["x"]
    out = aten.convolution.default(*_aten_args(x.float(), w, case, True))
    expected = _spike_convolution(_aten_args(x, w, case, True), {}, out)
    assert _our_value(case, True) == expected


@settings(max_examples=60, deadline=None)
@given(conv_cases(transposed=False), conv_cases(transposed=True), st.floats(0.0, 1.0))
def test_both_binary_matches_spikingjelly(normal, transposed_case, w_density):
    for case, transposed in ((normal, False), (transposed_case, True)):
        x = case["x"].float()
        w = (torch.rand(case["w_shape"], generator=case["gen"]) < w_density).float()
        args = _aten_args(x, w, case, transposed)
        expected = _spike_convolution(args, {}, aten.convolution.default(*args))
        got = conv_both_binary_sum(x, w, case["stride"], case["padding"], case["dilation"],
                                   transposed, case["outpad"], case["groups"])
        assert got.dim() == 0 and got.dtype == torch.float64
        assert int(got.item()) == expected


def test_hand_derived_1d():
    # I=4, K=3, pad=1, stride=1, dilation=1 -> O = (4 + 2 - 2 - 1)//1 + 1 = 4.
    # Output o reads inputs o-1, o, o+1 (i = o + k - 1); dropping the padded -1 and 4:
    #   o=0 -> {0,1}, o=1 -> {0,1,2}, o=2 -> {1,2,3}, o=3 -> {2,3}
    # so input 0 is read 2x, 1 and 2 are read 3x, 3 is read 2x.
    assert coverage_vector(4, 3, 1, 1, 1, False) == (2, 3, 3, 2)
    # Spikes at inputs 0 and 2 (batch 1, one channel): taps = 2 + 3 = 5; with 2 output
    # channels every tap hits both kernels, so SJ counts 5 * 2 = 10.
    x = torch.tensor([[[1.0, 0.0, 1.0, 0.0]]])
    taps = conv_spike_taps(x, (2, 1, 3), [1], [1], [1], False, [0], 1)
    assert taps.item() == 5
    assert spikingjelly_conv_value(5, (2, 1, 3), False, 1) == 10
    assert 10 == _spike_conv_weight_uses_from_tensors(x, torch.rand(2, 1, 3), [1], [1], [1], 1)
    # Transposed, I=3, K=2, stride=2, pad=0: O = (3-1)*2 + 1 + 1 = 6; input i writes to
    # 2i + k for k in {0,1}, always inside [0, 6), so every input has both taps.
    assert coverage_vector(3, 2, 2, 0, 1, True) == (2, 2, 2)
    # Same with pad=1: O = 4 and input 0 writes to -1 (lost) and 0; input 2 writes 3 and 4
    # (lost), so the edge inputs keep one tap each.
    assert coverage_vector(3, 2, 2, 1, 1, True) == (1, 2, 1)


def test_coverage_map_is_outer_product_and_cached():
    m = coverage_map((4, 3), (3, 2), [1, 2], [1, 0], [1, 1], False, [0, 0])
    assert m.dtype == torch.float64 and m.shape == (4, 3) and m.device.type == "cpu"
    rows = torch.tensor(coverage_vector(4, 3, 1, 1, 1, False), dtype=torch.float64)
    cols = torch.tensor(coverage_vector(3, 2, 2, 0, 1, False), dtype=torch.float64)
    assert torch.equal(m, torch.outer(rows, cols))
    assert coverage_map((4, 3), (3, 2), [1, 2], [1, 0], [1, 1], False, [0, 0]) is m
    meta = coverage_map((4, 3), (3, 2), [1, 2], [1, 0], [1, 1], False, [0, 0], device="meta")
    assert meta.device.type == "meta" and meta.shape == (4, 3)


def test_rejects_unbatched_input():
    with pytest.raises(ValueError):
        conv_spike_taps(torch.ones(1, 4), (2, 1, 3), [1], [1], [1], False, [0], 1)


class _Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("grad_mode", [torch.no_grad, torch.enable_grad, torch.inference_mode])
def test_no_ops_leak_to_dispatch_mode(grad_mode):
    from spiketrace.capture.ops import conv_taps

    # Empty caches, so the mode would also see the coverage map being built and copied.
    conv_taps._cached_map.cache_clear()
    conv_taps.coverage_vector.cache_clear()
    x = (torch.rand(2, 4, 5, 6) < 0.5).float()
    w = (torch.rand(6, 2, 3, 3) < 0.5).float()
    x_meta = x.to("meta")
    recorder = _Recorder()
    with grad_mode(), recorder:
        taps = conv_spike_taps(x, w.shape, [1, 2], [1, 1], [1, 1], False, [0, 0], 2)
        both = conv_both_binary_sum(x, w, [1, 2], [1, 1], [1, 1], False, [0, 0], 2)
        taps_meta = conv_spike_taps(x_meta, w.shape, [1, 2], [1, 1], [1, 1], False, [0, 0], 2)
        seen_by_helpers = list(recorder.ops)
        x.sum()  # sanity: the recorder does see an ordinary op
    assert seen_by_helpers == []
    assert recorder.ops == [aten.sum.default]
    assert taps_meta.device.type == "meta" and taps_meta.dim() == 0
    expected = _spike_conv_weight_uses_from_tensors(x, w, [1, 2], [1, 1], [1, 1], 2)
    assert spikingjelly_conv_value(int(taps.item()), w.shape, False, 2) == expected
    dense = aten.convolution.default(x.double(), w.double(), None, [1, 2], [1, 1], [1, 1],
                                     False, [0, 0], 2)
    assert both.item() == dense.sum().item()


# --- every argument form aten.convolution carries ----------------------------------------------
# torch hands aten one value for all spatial dims (`F.conv2d(x, w, stride=[2])`,
# `padding="valid"` -> padding=[0]) or one per dim; callers of our helpers may also pass an
# int or an empty list (the default). Every form must give the full form's count.


def _short_forms(draw, values: list[int], default: int):
    """Forms that mean `values`: the full list always; one element / an int when all equal;
    [] when all are the default."""
    forms = [list(values)]
    if len(set(values)) == 1:
        forms += [[values[0]], values[0]]
    if all(v == default for v in values):
        forms.append([])
    return draw(st.sampled_from(forms))


@st.composite
def short_form_cases(draw, transposed: bool):
    case = draw(st.one_of(conv_cases(transposed=transposed, uniform=True), conv_cases(transposed=transposed)))
    forms = {
        "stride": _short_forms(draw, case["stride"], 1),
        "padding": _short_forms(draw, case["padding"], 0),
        "dilation": _short_forms(draw, case["dilation"], 1),
        "outpad": _short_forms(draw, case["outpad"], 0),
    }
    return case, forms


def _aten_accepts(form) -> bool:
    return isinstance(form, list) and len(form) > 0


@settings(max_examples=120, deadline=None)
@given(st.booleans().flatmap(lambda t: st.tuples(st.just(t), short_form_cases(transposed=t))))
def test_every_argument_form_counts_like_the_full_form(drawn):
    from spiketrace.capture.ops import op_statistics

    transposed, (case, forms) = drawn
    full = _our_value(case, transposed)
    short = dict(case, stride=forms["stride"], padding=forms["padding"], dilation=forms["dilation"],
                 outpad=forms["outpad"])
    assert _our_value(short, transposed) == full
    # Through the capture's per-op statistic, with the arguments as aten.convolution has them.
    w = torch.rand(case["w_shape"], generator=case["gen"]) * 0.5 + 0.25
    x = case["x"].float()
    args = _aten_args(x, w, short, transposed)
    taps = op_statistics.conv_spike_taps(args, None)
    assert spikingjelly_conv_value(int(taps.item()), case["w_shape"], transposed, case["groups"]) == full
    # Independently: aten's own expansion of the same forms, with an all-ones kernel.
    if all(_aten_accepts(forms[k]) for k in forms):
        ones = aten.convolution.default(x.double(), torch.ones(case["w_shape"], dtype=torch.float64), None,
                                         forms["stride"], forms["padding"], forms["dilation"], transposed,
                                         forms["outpad"], case["groups"])
        assert int(ones.sum().item()) == full
    # The both-binary sum takes the same forms.
    wb = (torch.rand(case["w_shape"], generator=case["gen"]) < 0.5).float()
    both = op_statistics.conv_both_binary_sum(_aten_args(x, wb, short, transposed), None)
    dense = aten.convolution.default(*_aten_args(x.double(), wb.double(), case, transposed))
    assert both.item() == dense.sum().item()


def test_hand_derived_one_element_forms():
    # padding="valid" on a 2-d conv reaches aten as padding=[0], output_padding=[0]: a 3x3
    # kernel over 4x4 with stride 1 gives 2x2 outputs; input (0, 0) is read by one (output,
    # tap) pair, (1, 1) by four, so cov = outer((1, 2, 2, 1), (1, 2, 2, 1)).
    x = torch.zeros(1, 1, 4, 4)
    x[0, 0, 0, 0] = x[0, 0, 1, 1] = 1
    taps = conv_spike_taps(x, (3, 1, 3, 3), [1, 1], [0], [1, 1], False, [0], 1)
    assert taps.item() == 1 * 1 + 2 * 2
    # stride=[2] on 5x5 with a 3x3 kernel and padding=[1]: outputs 0..2 per dim read inputs
    # 2o-1..2o+1, so per dim cov = (1, 1, 2, 1, 2)... input i is read by o with |2o - i| <= 1:
    # i=0: o=0; i=1: o=0,1; i=2: o=1; i=3: o=1,2; i=4: o=2 -> (1, 2, 1, 2, 1).
    assert coverage_vector(5, 3, 2, 1, 1, False) == (1, 2, 1, 2, 1)
    y = torch.ones(1, 1, 5, 5)
    assert conv_spike_taps(y, (1, 1, 3, 3), [2], [1], [1], False, [], 1).item() == 7 * 7
    with pytest.raises(ValueError, match="expected 1 or 2 values"):
        conv_spike_taps(y, (1, 1, 3, 3), [2, 2, 2], [1], [1], False, [0], 1)


def _conv_stats(path, weight, defer: bool) -> list[tuple[int, str, float]]:
    """(conv number, statistic, value) of three convolutions of binary spikes, recorded."""
    from spiketrace.capture import Recorder
    from tests.real_jobs.tracefiles import table

    x = (torch.rand(2, 3, 6, 6, generator=torch.Generator().manual_seed(1)) < 0.4).float()
    with Recorder(path, defer_statistics=defer) as recorder, recorder.stage("forward"):
        for _ in range(3):
            torch.nn.functional.conv2d(x, weight, padding=1)
    convs = [e["seq"] for e in table(path, "events").to_pylist() if e["op"] == "aten.convolution.default"]
    return sorted((convs.index(r["seq"]), r["stat"], r["value"]) for r in table(path, "op_stats").to_pylist())


@pytest.mark.parametrize("binary_weight", [True, False], ids=["binary-weight", "float-weight"])
def test_deferred_both_binary_statistic_waits_on_nothing_and_keeps_only_binary_weights(tmp_path, binary_weight,
                                                                                      monkeypatch):
    # The accelerator path (deferred statistics) must not read the weight on the host to decide
    # whether x and w are both binary (on a GPU that is a sync per convolution): it takes the
    # statistic on the device and drops it at flush where the weight was not binary; the rows
    # equal those read at once on CPU.
    import json

    import spiketrace.capture.ops.scalar_rows

    generator = torch.Generator().manual_seed(0)
    weight = (torch.rand(4, 3, 3, 3, generator=generator) < 0.5).float()
    if not binary_weight:
        weight = weight * 0.5 + 0.25
    immediate = _conv_stats(tmp_path / "now", weight, defer=False)

    def host_read(t):
        raise AssertionError("the deferred path read a tensor on the host")

    monkeypatch.setattr(spiketrace.capture.ops.scalar_rows, "immediate_stats", host_read)
    deferred = _conv_stats(tmp_path / "deferred", weight, defer=True)
    assert json.loads((tmp_path / "deferred" / "manifest.json").read_text())["degraded"] == []
    assert deferred == immediate
    assert any(stat == "conv_both_binary_sum" for _, stat, _ in immediate) is binary_weight
    assert {stat for _, stat, _ in immediate} >= {"conv_spike_taps"}
