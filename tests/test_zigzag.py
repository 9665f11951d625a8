"""A ZigZag hardware YAML's memories become a NeuroMC preset's memory instances."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from spiketrace.analyze.cli import main
from spiketrace.analyze.energy import PresetError, load_preset
from spiketrace.analyze.energy.neuromc.zigzag import preset_from_zigzag, read_memories

# ZigZag's inputs/hardware/tpu_like.yaml shape: size and bandwidths in bits, costs in pJ per access
TPU_LIKE = """
name: tpu_like
memories:
  sram_2MB:
    size: 16777216
    r_bw: 2048
    w_bw: 2048
    r_cost: 416.16
    w_cost: 378.4
    operands: [I1, O]
    served_dimensions: [D1, D2]
  dram:
    size: 10000000000
    r_bw: 64
    w_bw: 64
    r_cost: 700
    w_cost: 750
multipliers:
  multiplier_energy: 0.04
"""


@pytest.fixture
def hardware(tmp_path):
    path = tmp_path / "tpu_like.yaml"
    path.write_text(TPU_LIKE)
    return path


def test_mapped_memories_replace_the_instances(hardware):
    base = load_preset("neuromc-like-v1").costs()
    preset = preset_from_zigzag(hardware, mapping={"sram_2MB": "sram_fp_conv_in_w", "dram": "dram"})
    costs = preset.costs()
    sram = costs.memory_instances["sram_fp_conv_in_w"]
    assert (sram.size_bits, sram.r_bw, sram.w_bw, sram.r_cost, sram.w_cost) == (16777216, 2048, 2048, 416.16, 378.4)
    assert sram.datawidth == base.memory_instances["sram_fp_conv_in_w"].datawidth  # kept from the base
    assert costs.memory_instances["dram"].w_cost == 750
    untouched = [n for n in base.memory_instances if n not in ("sram_fp_conv_in_w", "dram")]
    assert all(costs.memory_instances[n] == base.memory_instances[n] for n in untouched)
    assert "tpu_like.yaml" in preset.source


def test_same_names_map_by_default_and_errors_name_the_problem(hardware, tmp_path):
    preset = preset_from_zigzag(hardware)  # "dram" exists on both sides
    assert preset.costs().memory_instances["dram"].r_cost == 700
    with pytest.raises(PresetError, match="no memory 'sram_4MB'"):
        preset_from_zigzag(hardware, mapping={"sram_4MB": "dram"})
    with pytest.raises(PresetError, match="no memory instance 'nope'"):
        preset_from_zigzag(hardware, mapping={"dram": "nope"})
    broken = tmp_path / "broken.yaml"
    broken.write_text(TPU_LIKE.replace("    r_cost: 700\n", ""))
    with pytest.raises(PresetError, match="memories.dram lacks numeric r_cost"):
        read_memories(broken)
    with pytest.raises(PresetError, match="no `memories:` block"):
        (tmp_path / "empty.yaml").write_text("name: x\n")
        read_memories(tmp_path / "empty.yaml")


def test_cli_writes_a_preset_that_loads_back(hardware, tmp_path):
    out = tmp_path / "tpu.toml"
    result = CliRunner().invoke(main, ["presets", "import-zigzag", str(hardware), "--map", "sram_2MB=sram_fp_conv_in_w",
                                       "--out", str(out)])
    assert result.exit_code == 0, result.output
    loaded = load_preset(out).costs()
    assert loaded == preset_from_zigzag(hardware, mapping={"sram_2MB": "sram_fp_conv_in_w"}).costs()
