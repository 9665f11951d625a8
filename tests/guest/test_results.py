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


def test_a_logging_subclass_sees_only_the_users_calls(tmp_path):
    manifest, _ = compare("logging_subclass", tmp_path)
    assert manifest["degraded"] == []
    seen = pickle.loads((tmp_path / "captured.pkl").read_bytes())
    # compare() found the log equal to the plain run's, call for call; none of the capture's
    # reads and registrations is in it
    for capture_call in ("register_hook", "view_as", "data_ptr", "untyped_storage", "stride", "is_neg"):
        assert capture_call not in seen["log"]
