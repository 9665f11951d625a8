"""The compiled per-op scalars (capture/native/_native_pairs.c, capture/native/_native_ternary.c) equal their
definitions, computed here with torch on every value: NeuroBench's nonzero-pair count of a
matrix product, its ternary input check, and a convolution input's nonzeros per position;
on every layout, dtype and odd value (NaN, inf, -0.0), and with the fast path
native_operand_statistics off, where torch's ops take them."""

from __future__ import annotations

import pytest
import torch

import spiketrace.capture.native


def _pairs_by_torch(x, y):
    # NeuroBench's pair count as the definition reads: for each inner index k, the nonzeros of
    # x's column k times those of y's row k (per batch), summed; in float64 (exact here).
    return float(((x != 0).double().sum(dim=-2) * (y != 0).double().sum(dim=-1)).sum())


def _pair_cases():
    torch.manual_seed(0)
    x = torch.randn(64, 32)
    x[x.abs() < 0.5] = 0
    y = torch.randn(32, 48)
    y[y.abs() < 0.7] = 0
    b = torch.randn(4, 8, 16)
    b[b > 0.3] = 0
    c = torch.randn(4, 16, 5)
    c[c < 0] = -0.0  # negative zeros are zeros
    odd = torch.tensor([[float("nan"), 0.0, -0.0], [1.0, float("inf"), 0.0]])  # NaN and inf are nonzero
    return {
        "row-major": (x, y),
        "column-major": (x.t().contiguous().t(), y.t().contiguous().t()),
        "weight transposed (linear)": (x, torch.randn(48, 32).t()),
        "batched": (b, c),
        "batched, x transposed in memory": (b.transpose(1, 2).contiguous().transpose(1, 2), c),
        "broadcast batch (stride 0)": (b, torch.randn(1, 16, 5).expand(4, 16, 5)),
        "spikes by float": ((b > 0).float(), c),
        "half": (b.half(), c.half()),
        "bfloat16": (b.bfloat16(), c.bfloat16()),
        "float64": (b.double(), c.double()),
        "int64": ((b * 3).long(), (c * 3).long()),
        "bool by float": (torch.rand(5, 6) > 0.5, (torch.rand(6, 7) > 0.5).float()),
        "nan, inf, -0.0": (odd, odd.t()),
        "empty rows": (torch.randn(0, 3), torch.randn(3, 4)),
        "empty inner": (torch.randn(3, 0), torch.randn(0, 4)),
        "a negated view": (torch._neg_view(x), y),
    }


@pytest.mark.parametrize("case", list(_pair_cases()))
def test_the_compiled_pair_count_equals_the_definition(case):
    from spiketrace.capture.ops import op_statistics, shared_operands

    if op_statistics._compiled_pairs is None:
        pytest.skip("spiketrace.capture.native._native not built")
    x, y = _pair_cases()[case]
    got = op_statistics._gemm_pairs(x, y)
    assert isinstance(got, int)  # the compiled pass took it (an exact count)
    assert got == _pairs_by_torch(x, y)
    with shared_operands.one_op((None, None), compiled=False):  # the fast path off: torch's ops
        assert float(op_statistics._gemm_pairs(x, y)) == got


@pytest.mark.parametrize("threads", [2, 3])
def test_a_pair_count_shared_among_threads_equals_the_definition(shared_scans, threads):
    if not spiketrace.capture.native.AVAILABLE:
        pytest.skip("no compiled path")
    # Each operand's lines cut among threads (capture/native/_native_pairs.c lines_share): a run of
    # the reduced axis into a row of counts of its own, or a run of k straight into the counts,
    # whichever the pass walks outermost; every operand shared here whatever its size.
    from spiketrace.capture.ops import op_statistics

    torch.set_num_threads(threads)
    cases = dict(_pair_cases())
    torch.manual_seed(4)
    wide = torch.randn(70, 130).relu()
    cases["uneven shares, both orders"] = (wide, torch.randn(130, 9).relu())
    cases["y read per row"] = (wide.t().contiguous().t(), torch.randn(130, 301).relu())
    for name, (x, y) in cases.items():
        assert op_statistics._gemm_pairs(x, y) == _pairs_by_torch(x, y), name


def _ternary_cases():
    torch.manual_seed(1)
    signs = torch.randint(-1, 2, (6, 7)).float()
    return {
        "float -1/0/1": signs,
        "float -1/0/1, -0.0": torch.where(signs == 0, torch.tensor(-0.0), signs),
        "float spikes": (torch.rand(6, 7) > 0.5).float(),
        "float analog": torch.randn(6, 7),
        "float, one 2.0 at the end": torch.cat([signs.reshape(-1), torch.tensor([2.0])]),
        "float, one NaN": torch.cat([signs.reshape(-1), torch.tensor([float("nan")])]),
        "float, one inf": torch.cat([signs.reshape(-1), torch.tensor([float("inf")])]),
        "half -1/0/1": signs.half(),
        "bfloat16 -1/0/1": signs.bfloat16(),
        "float64 -1/0/1": signs.double(),
        "int64 -1/0/1": signs.long(),
        "int64 with 2": torch.tensor([0, 1, -1, 2]),
        "int8 -128": torch.tensor([0, 1, -128], dtype=torch.int8),  # abs(-128) wraps to -128
        "uint8 255": torch.tensor([0, 1, 255], dtype=torch.uint8),  # abs(255) is 255, not 1
        "uint8 0/1": torch.tensor([0, 1, 1], dtype=torch.uint8),
        "transposed": signs.t(),
        "strided slice": torch.randint(-1, 2, (8, 9)).float()[::2, 1::3],
        "broadcast": signs[:1].expand(5, 7),
        "0-dim": torch.tensor(-1.0),
        "a negated view": torch._neg_view(signs),
        **_long_ternary_cases(),
    }


def _long_ternary_cases():
    """Contiguous lines of 1000 (the compiled check's blocks of 256 and a tail of 232): an
    other value inside a block, at its last lane, in the tail, and the values a block admits."""
    torch.manual_seed(2)
    signs = torch.randint(-1, 2, (2, 1000)).float()
    cases = {}
    for dtype in (torch.float32, torch.float16, torch.float64, torch.int64, torch.int32, torch.int8):
        line = signs.to(dtype)
        cases[f"long {dtype} -1/0/1"] = line
        for at in (300, 511, 999):
            other = line.clone()
            other[1, at] = 3
            cases[f"long {dtype}, 3 at {at}"] = other
    spikes = (torch.rand(2, 1000) > 0.5).to(torch.uint8)
    cases["long uint8 0/1"] = spikes
    wrapped = spikes.clone()
    wrapped[0, 700] = 255  # all bits set, -1 of a signed type, not of uint8
    cases["long uint8 with 255 in a block"] = wrapped
    for value in (float("nan"), float("inf"), -0.0, 0.5):
        line = signs.clone()
        line[0, 600] = value
        cases[f"long float with {value} in a block"] = line
    return cases


@pytest.mark.parametrize("case", list(_ternary_cases()))
def test_the_compiled_ternary_check_equals_the_definition(case):
    from spiketrace.capture.ops import op_statistics, shared_operands

    if op_statistics._compiled_ternary is None:
        pytest.skip("spiketrace.capture.native._native not built")
    x = _ternary_cases()[case]
    want = float(((x == 0) | (x.abs() == 1)).all())  # the definition, every value compared
    assert op_statistics._ternary(x) == want
    with shared_operands.one_op((None,), compiled=False):  # the fast path off: torch's ops
        assert float(op_statistics._ternary(x)) == want


def _spatial_cases():
    torch.manual_seed(2)
    analog = torch.randn(4, 8, 5, 6).relu()
    return {
        "spikes": (torch.rand(4, 8, 5, 6) > 0.7).float(),
        "analog": analog,
        "channels_last": analog.to(memory_format=torch.channels_last),
        "conv1d input": torch.randn(3, 4, 7).relu(),
        "conv3d input": torch.randn(2, 3, 4, 5, 6).relu(),
        "rows sliced (falls back)": torch.randn(4, 8, 10, 6).relu()[:, :, ::2],
        "a size-1 axis between sliced ones (falls back)": torch.randn(4, 8, 10, 1, 6).relu()[:, :, ::2],
        "batch and channels swapped": torch.randn(8, 4, 5, 6).relu().transpose(0, 1),
        "half": analog.half(),
        "nan and -0.0": torch.tensor([[[float("nan"), -0.0, 1.0]]]),
        "empty batch": torch.randn(0, 3, 4, 4),
        "no positions": torch.randn(2, 3, 0, 4),
    }


@pytest.mark.parametrize("case", list(_spatial_cases()))
def test_the_compiled_spatial_counts_equal_the_definition(case):
    # A convolution input's nonzeros per position over batch and channels (conv spike taps).
    from spiketrace.capture.ops import op_statistics

    x = _spatial_cases()[case]
    want = (x != 0).double().sum(dim=(0, 1))
    got = op_statistics._compiled_spatial_counts(x)
    if "falls back" in case or op_statistics._compiled_counts is None:
        assert got is None
    else:
        assert got.dtype == torch.float64 and torch.equal(got, want)
    assert torch.equal(op_statistics._spatial_counts(x), want)



@pytest.mark.parametrize("threads", [2, 3])
def test_spatial_counts_shared_among_threads_equal_the_definition(shared_scans, threads):
    if not spiketrace.capture.native.AVAILABLE:
        pytest.skip("no compiled path")
    # Cut into one run of positions per thread (capture/native/_native_pairs.c count_share, every
    # count shared here whatever its size): the same counts, on each layout the pass reads.
    from spiketrace.capture.ops import op_statistics

    torch.set_num_threads(threads)
    torch.manual_seed(3)
    analog = torch.randn(3, 5, 17, 23).relu()  # 391 positions: uneven shares
    for name, x in {"analog": analog, "channels_last": analog.to(memory_format=torch.channels_last),
                    "batch and channels swapped": analog.transpose(0, 1), "int8": (analog * 4).to(torch.int8),
                    "conv1d": torch.randn(2, 3, 500).relu()}.items():
        got = op_statistics._compiled_spatial_counts(x)
        assert got is not None and torch.equal(got, (x != 0).double().sum(dim=(0, 1))), name


def _binary_products():
    torch.manual_seed(3)
    spikes = (torch.rand(4, 24, 40) > 0.6).float()
    keys = (torch.rand(4, 40, 24) > 0.5).float()
    ones = torch.ones(2, 2049)
    return {  # (op, x, y, whether the output is exact: its sum is the pair count)
        "bmm float32": (torch.bmm, spikes, keys, True),
        "mm float32": (torch.mm, spikes[0], keys[0], True),
        "bmm float64": (torch.bmm, spikes.double(), keys.double(), True),
        # 2049 ones summed in half round to 2048: SpikingJelly sums that output, rounding included
        "mm float16, K = 2049": (torch.mm, ones.half(), ones.t().half(), False),
    }


@pytest.mark.parametrize("case", list(_binary_products()))
def test_the_output_sum_of_a_binary_product_is_what_summing_its_output_gives(case, tmp_path):
    # SpikingJelly's AC and SynOp count of a 0/1 x 0/1 product is out.sum(dtype=float64). In
    # float32/float64 every output element is an exact count, so the capture reads the sum off
    # the pair count; where the output rounds (half), it sums the output. Either way the trace
    # holds what summing the output gives, computed here on the output itself.
    from spiketrace.analyze import open_trace
    from spiketrace.capture import record_inference

    op, x, y, exact = _binary_products()[case]

    class Product(torch.nn.Module):
        def forward(self, x, y):
            return op(x, y)

    out = op(x, y)
    want = float(out.sum(dtype=torch.float64))
    assert (want == _pairs_by_torch(x, y)) is exact
    with open_trace(record_inference(tmp_path / "t", Product(), (x, y))) as trace:
        stats = trace.sql("SELECT stat, value FROM op_stats ORDER BY stat")
    got = dict(stats.itertuples(index=False, name=None))
    assert got["mm_out_sum"] == want
    assert got["mm_nonzero_pairs"] == _pairs_by_torch(x, y)
