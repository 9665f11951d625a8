"""Preset files: units, validation errors that name file and key, overrides, the CLI."""

from __future__ import annotations

import json
import tomllib

import pytest
from click.testing import CliRunner

from analyze.cli import main
from analyze.energy import sweep_presets
from analyze.energy import PresetError, list_presets, load_preset, read_preset_file
from analyze.presets import PRESET_DIR, convert

GOOD = """
[preset]
name = "mine"
model = "compute"
description = "test"
source = "hand-written for the test"

[parameters]
e_mac_pj = { value = 3100, unit = "fJ" }
e_ac_pj = { value = 0.9, unit = "pJ" }
e_memory_pj_per_byte = { value = 3.12, unit = "pJ/bit" }
"""


def write(tmp_path, text, name="preset.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_units_are_converted_to_the_models_units(tmp_path):
    costs = read_preset_file(write(tmp_path, GOOD)).costs()
    assert costs.e_mac_pj == pytest.approx(3.1)
    assert costs.e_memory_pj_per_byte == pytest.approx(3.12 * 8)  # per bit -> per byte


def test_conversions_by_hand():
    assert convert(1, "nJ", "pJ") == 1000
    assert convert(2, "pJ/byte", "pJ/bit") == 0.25
    assert convert(1, "KiB", "bit") == 8192
    with pytest.raises(ValueError, match="not a energy"):
        convert(1, "bit", "pJ")


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace("e_ac_pj", "e_acc_pj"), "unknown key 'e_acc_pj'"),
    (lambda t: t.replace("value = 0.9", "value = -0.9"), "e_ac_pj = -0.9 pJ: an energy cannot be negative"),
    (lambda t: t.replace('unit = "pJ" }', 'unit = "bit" }'), "e_ac_pj: unit 'bit' is not a energy"),
    (lambda t: t.replace('{ value = 0.9, unit = "pJ" }', "0.9"), "e_ac_pj = 0.9 needs its unit"),
    (lambda t: t.replace('model = "compute"', 'model = "nope"'), "unknown model 'nope'"),
    (lambda t: t.replace('source = "hand-written for the test"', ""), "lacks source"),
    (lambda t: t + "\n[extra]\nx = 1\n", "unknown top-level table"),
    (lambda t: t.replace("[parameters]", "[parameters"), "not valid TOML"),
])
def test_malformed_presets_are_refused_naming_file_and_key(tmp_path, edit, message):
    path = write(tmp_path, edit(GOOD))
    with pytest.raises(PresetError) as error:
        read_preset_file(path)
    assert message in str(error.value)
    assert str(path) in str(error.value)


def test_overrides_keep_units_and_validate():
    base = load_preset("compute-fp32-45nm")
    derived = base.derive(["e_mac_pj=2.5", "e_ac_pj=100 fJ"])
    assert (derived.costs().e_mac_pj, derived.costs().e_ac_pj) == (2.5, pytest.approx(0.1))
    assert base.costs().e_mac_pj == 4.6  # the base is unchanged
    with pytest.raises(PresetError, match="e_mac_pj = -1.0 pJ: an energy cannot be negative"):
        base.derive({"e_mac_pj": -1})
    with pytest.raises(PresetError, match="not KEY=VALUE"):
        base.derive(["e_mac_pj"])


def test_sweep_is_the_cartesian_product():
    swept = sweep_presets(load_preset("compute-fp32-45nm"), {"e_mac_pj": [1, 2], "e_ac_pj": [0.1, 0.2, 0.3]})
    assert sorted((p.costs().e_mac_pj, p.costs().e_ac_pj) for p in swept) == sorted(
        (m, a) for m in (1.0, 2.0) for a in (0.1, 0.2, 0.3))
    assert len({p.name for p in swept}) == 6


def test_every_shipped_preset_has_units_and_a_source():
    shipped = list_presets()
    assert {p.name for p in shipped} >= {"compute-fp32-45nm", "compute-fp16-45nm", "compute-int8-45nm"}
    for preset in shipped:
        raw = tomllib.loads((PRESET_DIR / f"{preset.name}.toml").read_text())
        assert raw["preset"]["source"].strip()
        assert set(preset.flat()) == set(preset.units)


def test_presets_cli(tmp_path):
    runner = CliRunner()
    listed = runner.invoke(main, ["presets", "list", "--format", "json"])
    assert listed.exit_code == 0 and "compute-int8-45nm" in {p["name"] for p in json.loads(listed.output)}
    shown = runner.invoke(main, ["presets", "show", "compute-int8-45nm", "--set", "e_mac_pj=1", "--format", "json"])
    assert json.loads(shown.output)["parameters"]["e_mac_pj"] == {"value": 1.0, "unit": "pJ"}
    good = runner.invoke(main, ["presets", "validate", str(write(tmp_path, GOOD))])
    assert good.exit_code == 0 and "ok" in good.output
    bad = runner.invoke(main, ["presets", "validate", str(write(tmp_path, GOOD.replace("e_ac_pj", "x"), "bad.toml"))])
    assert bad.exit_code == 2
    assert bad.output.startswith("error: ") and "bad.toml" in bad.output and "unknown key 'x'" in bad.output


def test_an_unknown_override_blames_the_users_key_and_suggests_the_fix():
    with pytest.raises(PresetError) as raised:
        load_preset("compute-fp32-45nm", ["e_mc_pj=3"])
    message = str(raised.value)
    # before: "<path of the shipped TOML>: unknown key 'e_mc_pj' (known: ...)"
    assert message.startswith("override e_mc_pj=3: unknown key 'e_mc_pj'")
    assert "did you mean e_mac_pj" in message and ".toml" not in message
