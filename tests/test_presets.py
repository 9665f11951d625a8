"""Preset files: units, validation errors that name file and key, overrides, the CLI."""

from __future__ import annotations

import json
import tomllib

import pytest
from click.testing import CliRunner

from spiketrace.analyze.cli import main
from spiketrace.analyze.energy import PresetError, list_presets, load_preset, read_preset_file, sweep_presets
from spiketrace.analyze.presets import PRESET_DIR, convert

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
    (lambda t: t.replace('{ value = 0.9, unit = "pJ" }', '{ unit = "pJ" }'),
     "e_ac_pj must be { value = ..., unit = \"pJ\" }, got keys ['unit']"),
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
    assert listed.exit_code == 0 and "compute-int8-45nm" in {p["name"] for p in json.loads(listed.stdout)}
    shown = runner.invoke(main, ["presets", "show", "compute-int8-45nm", "--set", "e_mac_pj=1", "--format", "json"])
    assert json.loads(shown.stdout)["parameters"]["e_mac_pj"] == {"value": 1.0, "unit": "pJ"}
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


# --- strict presets: ranges, required keys, choices, strict units, all problems at once ---

NEUROMC = (PRESET_DIR / "neuromc-like-v1.toml").read_text()


def problems_of(path_or_call):
    """The PresetError lines of reading `path_or_call` (a path, or a function to call)."""
    with pytest.raises(PresetError) as raised:
        path_or_call() if callable(path_or_call) else read_preset_file(path_or_call)
    assert str(raised.value) == "\n".join(raised.value.problems)
    return raised.value.problems


def test_every_number_key_of_every_model_has_a_declared_range_and_known_keys():
    from spiketrace.analyze.energy import MODELS, model_spec
    from spiketrace.analyze.energy.neuromc.costs import REQUIRED_INSTANCES
    from spiketrace.analyze.presets.checks import match
    from spiketrace.analyze.presets.loader import _is_table
    from spiketrace.analyze.presets.ranges import CHOICES, NEUROMC_INSTANCES, RANGES, REQUIRED, REQUIRED_WHEN

    assert NEUROMC_INSTANCES == REQUIRED_INSTANCES
    for model in MODELS:
        units = model_spec(model).PRESET_UNITS
        numbers = {pattern for pattern, unit in units.items() if unit not in ("str", "bool")}
        assert numbers == set(RANGES[model]), model  # a range for each number key, none for another
        for low, high, _ in RANGES[model].values():
            assert low <= high
        assert set(CHOICES.get(model, {})) <= {p for p, unit in units.items() if unit == "str"}
        required = [*REQUIRED[model], *(k for keys in REQUIRED_WHEN.get(model, {}).values() for k in keys)]
        for key in required:  # a required key is a key (or a table) of the model
            concrete = key.replace("*", "x")
            assert match(concrete, units) or _is_table(concrete, units), key


@pytest.mark.parametrize("edit, fragment", [
    (lambda t: t.replace("value = 3100", "value = 1e308"), "e_mac_pj = 1e+308 fJ (1e+305 pJ): above the maximum 1e+06 pJ"),
    (lambda t: t.replace("value = 3100", "value = inf"), "e_mac_pj = inf fJ (inf pJ): not a finite number"),
    (lambda t: t.replace("value = 3100", "value = nan"), "e_mac_pj = nan fJ (nan pJ): not a finite number"),
    (lambda t: t.replace("value = 3100", "value = 1" + "0" * 400), "e_mac_pj = an integer of 401 digits"),
    (lambda t: t.replace('unit = "fJ"', 'unit = "pJ/"'), "e_mac_pj: unknown unit 'pJ/'"),
    (lambda t: t.replace('unit = "fJ"', 'unit = "f J"'), "e_mac_pj: unknown unit 'f J'"),
    (lambda t: t.replace("value = 3100", "value = ٣١٠٠"), "not valid TOML"),
    (lambda t: t.replace("value = 3100", "value = 3100.0, extra = 1"), "e_mac_pj must be { value = ..."),
    (lambda t: t.split("[parameters]")[0], "missing [parameters] table"),
    (lambda t: t.replace('e_mac_pj = { value = 3100, unit = "fJ" }', ""), "e_mac_pj: missing (required"),
    (lambda t: t.replace('description = "test"', "description = 5"), "[preset] description = 5: must be a string"),
    (lambda t: t.replace('description = "test"', 'colour = "red"'), "[preset] colour: unknown key"),
    (lambda t: t + "\n" + ".".join(["deep"] * 2000) + " = 1\n", "nested deeper than 8 levels"),
    (lambda t: t + "\nx = " + "[" * 2000 + "]" * 2000 + "\n", "not valid TOML: nested too deeply"),
])
def test_malformed_presets_of_the_fuzzing_report_are_refused(tmp_path, edit, fragment):
    path = write(tmp_path, edit(GOOD))
    lines = problems_of(path)
    assert any(fragment in line for line in lines), lines
    assert all(line.startswith(str(path)) for line in lines)


@pytest.mark.parametrize("override, fragment", [
    ("e_mac_pj=1e308", "e_mac_pj = 1e+308 pJ: above the maximum 1e+06 pJ"),
    ("e_mac_pj=1e400", "e_mac_pj = inf pJ: not a finite number"),
    ("e_mac_pj=nan", "is not a number in ASCII digits"),
    ("e_mac_pj=١.٥", "is not a number in ASCII digits"),
    ("e_mac_pj=1_000", "is not a number in ASCII digits"),
    ("e_mac_pj=1.5 pJ/", "unknown unit 'pJ/'"),
    ("e_mac_pj=-2", "an energy cannot be negative"),
])
def test_bad_overrides_are_refused_naming_the_override(override, fragment):
    lines = problems_of(lambda: load_preset("compute-fp32-45nm", [override]))
    assert len(lines) == 1 and lines[0].startswith(f"override {override}: ") and fragment in lines[0], lines


@pytest.mark.parametrize("model_preset, override, fragment", [
    ("spikesim-rram-64", "xbar_size=1e12", "xbar_size = 1e+12: above the maximum 4096"),
    ("spikesim-rram-64", "xbar_size=2.5", "xbar_size = 2.5: must be a whole number"),
    ("spikesim-rram-64", "device=flash", "device = 'flash': must be one of rram, sram"),
    ("neuromc-like-v1", "technology_nm=-32", "technology_nm = -32.0 nm: below the minimum 1 nm"),
    ("neuromc-like-v1", "memory_instances.dram.datawidth=0.5", "must be a whole number of bit"),
    ("neuromc-like-v1", "level_order=dram,sram,reg", "lacks noc"),
    ("neuromc-like-v1", "level_order=dram,sram,reg,noc,sram", "'sram' listed more than once"),
    ("neuromc-like-v1", "level_order=dram,sram,reg,cache", "unknown name 'cache'"),
    ("lemaire-qualia", "qualia.mem_width=1e9", "qualia.mem_width = 1e+09 bit: above the maximum 1024 bit"),
])
def test_ranges_whole_numbers_and_choices_per_model(model_preset, override, fragment):
    lines = problems_of(lambda: load_preset(model_preset, [override]))
    assert any(fragment in line for line in lines), lines


def test_every_problem_is_listed_at_once_one_line_each(tmp_path):
    text = GOOD.replace("value = 3100", "value = inf").replace('unit = "pJ" }', 'unit = "pJ/" }')
    text = text.replace("e_memory_pj_per_byte", "e_memory_pj_per_bite")
    path = write(tmp_path, text)
    lines = problems_of(path)
    assert len(lines) == 4, lines  # e_mac_pj inf, e_ac_pj unit, the unknown key, e_memory_pj_per_byte missing
    assert [k for k in ("e_mac_pj", "e_ac_pj", "e_memory_pj_per_bite", "e_memory_pj_per_byte")
            if any(f": {k}" in line or f"'{k}'" in line for line in lines)] == [
        "e_mac_pj", "e_ac_pj", "e_memory_pj_per_bite", "e_memory_pj_per_byte"]
    several = problems_of(lambda: load_preset("compute-fp32-45nm", ["e_mac_pj=inf", "e_ac_pj=-1", "e_mc_pj=1"]))
    assert len(several) == 3
    result = CliRunner().invoke(main, ["presets", "validate", str(path)])
    assert result.exit_code == 2
    assert result.output.splitlines() == [f"error: {line}" for line in lines]


def test_neuromc_needs_its_instances_tables_and_a_permutation_of_levels(tmp_path):
    empty = NEUROMC.split("[parameters.memory_instances.reg_1b]")[0] + "[parameters.memory_instances]\n"
    assert problems_of(write(tmp_path, empty)) == [
        f"{tmp_path / 'preset.toml'}: memory_instances: an empty table (at least one entry is required)"]
    one_less = NEUROMC.replace("[parameters.memory_instances.dram]", "[parameters.memory_instances.dram_gone]")
    assert any("memory_instances.dram: missing" in line for line in problems_of(write(tmp_path, one_less)))
    no_mac = NEUROMC.replace("[parameters.mac_cost_pj]", "[parameters.mac_cost_pj_old]")
    assert any("mac_cost_pj_old" in line for line in problems_of(write(tmp_path, no_mac)))
    for order, fragment in (("[]", "lacks dram, sram, reg, noc"), ('["dram", "dram", "sram", "reg", "noc"]', "more than once"),
                            ('["dram", "sram", "reg", "l3"]', "unknown name 'l3'"), ('"dram"', "must be a list")):
        text = NEUROMC.replace('level_order = ["dram", "sram", "reg", "noc"]', f"level_order = {order}")
        assert any(fragment in line for line in problems_of(write(tmp_path, text))), order


def test_a_preset_inherits_its_parents_parameters_and_says_so(tmp_path):
    child = ('[preset]\nname = "mine"\nmodel = "neuromc"\ndescription = "d"\nsource = "s"\n'
             'inherits = "neuromc-like-v1"\n\n[parameters.mac_cost_pj]\nwg = { value = 700, unit = "fJ" }\n')
    loaded, parent = read_preset_file(write(tmp_path, child)), load_preset("neuromc-like-v1")
    assert loaded.flat() == {**parent.flat(), "mac_cost_pj.wg": pytest.approx(0.7)}
    assert loaded.inherits == "neuromc-like-v1" and loaded.to_json()["inherits"] == "neuromc-like-v1"
    grandchild = write(tmp_path, child.replace('"neuromc-like-v1"', '"preset.toml"').replace("700", "800"), "grand.toml")
    assert read_preset_file(grandchild).flat()["mac_cost_pj.wg"] == pytest.approx(0.8)
    assert read_preset_file(grandchild).flat()["mac_cost_pj.fp_soma"] == parent.flat()["mac_cost_pj.fp_soma"]
    for parent_name, fragment in (("compute-fp32-45nm", "a compute preset, not neuromc"), ("nope", "not a shipped"),
                                  ("loop.toml", "a cycle")):
        path = write(tmp_path, child.replace('"neuromc-like-v1"', f'"{parent_name}"'), "loop.toml")
        assert any(fragment in line for line in problems_of(path)), parent_name


def test_special_files_are_refused_without_blocking(tmp_path):
    import os

    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    assert problems_of(fifo) == [f"{fifo}: not a regular file"]
    assert problems_of(tmp_path) == [f"{tmp_path}: not a regular file"]
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    assert problems_of(binary) == [f"{binary}: not UTF-8 text"]


def test_strict_units():
    for unit in ("pJ/", "pJ / bit", " pJ", "pJ/bit/byte", "ｐJ", "p J", ""):
        with pytest.raises(ValueError, match="unknown unit"):
            convert(1, unit, "pJ")
