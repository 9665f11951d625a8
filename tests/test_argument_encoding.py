"""The interned argument encoding (capture/session/fast_paths.py `interned_arguments`) gives exactly
the JSON and tensor slots of the encoder, on first sight of a structure and on every repeat.

Keys that compare equal in Python but encode differently are the risk: 0.0 == -0.0, 2.0 == 2,
True == 1, (2, 3) == [2, 3] (the last two do encode alike), nan != nan."""

from __future__ import annotations

import math

import pytest
import torch

from spiketrace.capture.ops.arguments import encode_call

T = torch.ones(2)
U = torch.zeros(3)

ARGUMENTS = [
    (T, 2.0), (T, 2), (T, True), (T, 1), (T, 1.0), (T, 0.0), (T, -0.0), (T, 0), (T, False),
    (T, -1e-300), (T, 1e300), (T, 3.141592653589793), (T, math.inf), (T, -math.inf), (T, math.nan),
    (T, [2, 3]), (T, (2, 3)), (T, [2.0, 3]), (T, [True, 1]), (T, [1, True]), (T, []), (T, ()),
    ([T, U],), ([T, U], 1), ((U, T, U), -1), ([T, None],), ([],), (T, None, 3.5), (None, T, [0, 1], 2.5),
    (T, "mean"), (T, torch.float16), (T, [[1, 2], [3]]), (T, [T, 2]),
    (T, [True, False, True]), (T, [1, 0, 1]), (T, (False,)), (T, (0,)), (T, [True, 1.0]), (T, [False, None]),
]


def _plain(args):
    return [(id(t), slot) for t, slot in args]


@pytest.mark.parametrize("out", [T, (T, U), None], ids=["tensor", "tuple", "none"])
def test_interned_encoding_equals_the_encoder_on_first_sight_and_on_repeats(out):
    # Three rounds: the first fills the interning tables, the others read them; every round
    # in an order where each float meets the equal-comparing values before and after it.
    for arguments in (ARGUMENTS, ARGUMENTS[::-1], ARGUMENTS):
        for args in arguments:
            interned = encode_call(args, {}, out, intern=True)
            encoded = encode_call(args, {}, out, intern=False)
            assert interned[:3] == encoded[:3], args
            assert _plain(interned[3]) == _plain(encoded[3]), args


def test_signed_zero_floats_and_ints_keep_their_own_json():
    # Hand-written: what the trace must hold for each (json.dumps of the value, as the encoder).
    # (pairs, not a dict: 0.0, -0.0 and 0 are one dict key, the very trap under test)
    expected = [(0.0, '[{"$t":0},0.0]'), (-0.0, '[{"$t":0},-0.0]'), (0, '[{"$t":0},0]'), (2.0, '[{"$t":0},2.0]'),
                (2, '[{"$t":0},2]'), (True, '[{"$t":0},true]'), (1, '[{"$t":0},1]'),
                (math.inf, '[{"$t":0},{"$float":"inf"}]')]
    for _ in range(2):
        for value, json in expected:
            assert encode_call((T, value), {}, T)[0] == json, value


def test_a_tensor_list_numbers_its_items_in_order():
    args_json, _, out_json, tensors = encode_call(([T, U, T], 0), {}, U)
    assert args_json == '[[{"$t":0},{"$t":1},{"$t":2}],0]' and out_json == '{"$t":3}'
    assert [(t is T, slot) for t, slot in tensors] == [
        (True, ("arg", 0, None, 0)), (False, ("arg", 0, None, 1)), (True, ("arg", 0, None, 2)), (False, ("out", 0, None, None)),
    ]
