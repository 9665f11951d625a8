"""Capture changes no result and no object the user holds."""

from __future__ import annotations

import pickle

from tests.guest.harness import compare


def test_restoring_training_step_keeps_the_users_optimizer_objects(tmp_path):
    compare("restored_optimizer", tmp_path)
    seen = pickle.loads((tmp_path / "captured.pkl").read_bytes())
    # lr 0 through the group the user held: no parameter moved (with load_state_dict the
    # optimizer drove a new group and every parameter moved)
    assert seen["moved"] == [False] * 4 and seen["group_is_live"] and seen["moments_are_live"]
