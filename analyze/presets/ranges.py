"""What a preset's values may be, per model: data the loader checks before a model sees them.

The units of each key are the model's (`PRESET_UNITS` in its module); what values are
plausible is declared here, beside the units, so presets never import the models:

- RANGES: model -> {key pattern: (minimum, maximum, whole)}, bounds inclusive, in the unit
  the model declares for the key; `whole` asks for an integral value (bits of a datawidth,
  crossbar rows). A number outside its range, or not finite, is refused. The bounds are
  wide (six orders of magnitude beyond any hardware the models describe) so that no sweep
  of plausible values is refused, yet every total stays finite.
- CHOICES: model -> {key: (kind, allowed)}: "one of" a string in `allowed`, or
  "permutation": a list holding every allowed name exactly once.
- REQUIRED: model -> key patterns every preset gives (no silent defaults: a preset that wants
  another's values says `inherits = "NAME"` in [preset]). "a.b" must be present; "a.*.c"
  needs table `a` non-empty and `c` in every entry of it; "a.*" needs table `a` non-empty.
- REQUIRED_WHEN: model -> {(key, value): patterns} required only when `key` has `value`.

A key of a model with no declared range falls back to the checks by dimension (no negative
energy, sizes positive) and |value| <= FALLBACK_LIMIT; tests/test_presets.py checks that
every number key of every registered model has a range here.
"""

from __future__ import annotations

ENERGY = (0.0, 1e6, False)  # pJ per operation or access: 1 uJ, far above a DRAM access (~1e3 pJ)
FALLBACK_LIMIT = 1e15

# SpikingJelly's MemoryHierarchyConfig.validate() list (neuromc/costs.py REQUIRED_INSTANCES;
# a test keeps the two equal).
NEUROMC_INSTANCES = (
    "reg_1b", "reg_16b", "reg_32b", "sram_fp_conv_in_s", "sram_fp_conv_in_w", "sram_fp_conv_out_xi",
    "sram_fp_soma_u", "sram_fp_soma_s", "sram_fp_soma_smask", "sram_bp_conv_in_du", "sram_bp_conv_in_w",
    "sram_bp_conv_out_res", "sram_bp_grad_in_u", "sram_bp_grad_in_s", "sram_bp_grad_in_smask",
    "sram_bp_grad_out_du", "sram_wg_conv_in_s", "sram_wg_conv_in_du", "sram_wg_conv_out_dw",
    "sram_2MB", "sram_6MB", "dram",
)
_INSTANCE_LEAVES = ("size_bits", "datawidth", "r_bw", "w_bw", "r_cost", "w_cost")
_SPIKESIM_PJ = ("tile_buffer_pj", "temp_buffer_pj", "sub_pj", "adc_pj", "htree_pj", "mux_pj", "mem_fetch_pj",
                "neuron_pj", "rram_xbar_pj", "sram_xbar_pj")
_SPIKESIM_UM2 = ("rram_xbar_um2", "sram_xbar_um2", "temp_buffer_um2", "sub_um2", "adc_um2", "htree_um2", "mux_um2")
_QUALIA = ("mem_width", "sram_estimation", "ram_slope", "ram_floor", "bus_width", "bus_access")

RANGES: dict[str, dict[str, tuple[float, float, bool]]] = {
    "compute": {"e_mac_pj": ENERGY, "e_ac_pj": ENERGY, "e_memory_pj_per_byte": ENERGY},
    "paper": {"e_mac_pj": ENERGY, "e_ac_pj": ENERGY},
    "chip": {"e_synaptic_op_pj": ENERGY, "e_neuron_update_active_pj": ENERGY, "e_neuron_update_inactive_pj": ENERGY,
             "e_spike_pj": ENERGY, "neuron_time_nj_per_ms": (0.0, 1e9, False),  # nJ per neuron per ms: up to 1 W each
             "static_power_mw": (0.0, 1e9, False)},  # mW: up to a megawatt
    "neuromc": {
        "technology_nm": (1, 1000, True),
        "memory_instances.*.size_bits": (1, 2**53, True),  # up to 1 PiB
        "memory_instances.*.datawidth": (1, 4096, True),
        # bits moved per access; a sweep may take values between whole numbers
        "memory_instances.*.r_bw": (1, 2**20, False),
        "memory_instances.*.w_bw": (1, 2**20, False),
        "memory_instances.*.r_cost": ENERGY,
        "memory_instances.*.w_cost": ENERGY,
        "mac_cost_pj.*": ENERGY,
        "extra_op_cost_pj.*": ENERGY,
    },
    "lemaire": {
        "e_add_pj": ENERGY,
        "e_mul_pj": ENERGY,
        "snn_fifo_capacity_elements": (1, 2**32, True),
        "memory_breakpoints.*.capacity_bytes": (0, 2**50, False),  # SpikingJelly's first point sits at 0
        "memory_breakpoints.*.pj_per_byte": ENERGY,
        "qualia.mem_width": (1, 1024, True),
        "qualia.ram_slope": (0.0, 1e3, False),  # pJ per bit per element
        "qualia.ram_floor": ENERGY,
        "qualia.bus_width": (1, 4096, True),
        "qualia.bus_access": ENERGY,
    },
    "spikesim": {
        "xbar_size": (1, 4096, True),
        **{name: ENERGY for name in _SPIKESIM_PJ},
        **{f"area.{name}": (0.0, 1e10, False) for name in _SPIKESIM_UM2},  # um2: up to 100 cm2
        "area.sram_bit_um2": (0.0, 1e6, False),
        "area.tile_buffer_bits": (0, 2**40, True),
        "area.buffer_bits_per_element": (0, 1024, True),
        "area.pe_per_tile": (1, 4096, True),
        "area.neuron_memory_layers": (0, 10_000, True),
        "latency.clock_mhz": (1e-3, 1e5, False),
        "latency.pe_cycle_clocks": (0.0, 1e6, False),
        "latency.pipeline_fraction": (0.0, 1.0, False),
    },
}

CHOICES: dict[str, dict[str, tuple[str, tuple[str, ...]]]] = {
    "neuromc": {"level_order": ("permutation", ("dram", "sram", "reg", "noc"))},
    "lemaire": {"convention": ("one of", ("spikingjelly", "qualia")),
                "qualia.sram_estimation": ("one of", ("old", "new"))},
    "spikesim": {"device": ("one of", ("rram", "sram")), "activity_mode": ("one of", ("dense", "event"))},
}

REQUIRED: dict[str, tuple[str, ...]] = {
    "compute": ("e_mac_pj", "e_ac_pj", "e_memory_pj_per_byte"),
    "paper": ("e_mac_pj", "e_ac_pj"),
    "chip": ("e_synaptic_op_pj",),  # its other terms are optional: absent is not in the chip's figures
    "neuromc": (
        "preset_name", "technology_nm", "level_order",
        "zero_dram_in_paper_energy", "zero_noc_in_paper_energy", "zero_sram_high_directions",
        *(f"memory_instances.{name}" for name in NEUROMC_INSTANCES),
        *(f"memory_instances.*.{leaf}" for leaf in _INSTANCE_LEAVES),
        # SpikingJelly's _MAC_COST_PJ entries (other core types do no MACs) and every primitive
        *(f"mac_cost_pj.{core}" for core in ("fp_soma", "bp_grad", "wg", "ann_fe", "ann_be", "ann_we")),
        *(f"extra_op_cost_pj.{primitive}" for primitive in ("mux", "add", "mul", "comp", "sqrt")),
    ),
    "lemaire": ("convention", "e_add_pj", "e_mul_pj", "snn_fifo_capacity_elements"),
    "spikesim": (
        "xbar_size", "device", "activity_mode", "require_if_lif_neurons", *_SPIKESIM_PJ,
        *(f"area.{name}" for name in (*_SPIKESIM_UM2, "sram_bit_um2", "tile_buffer_bits", "buffer_bits_per_element",
                                      "pe_per_tile", "neuron_memory_layers")),
        "latency.clock_mhz", "latency.pe_cycle_clocks", "latency.pipeline_fraction",
    ),
}

REQUIRED_WHEN: dict[str, dict[tuple[str, str], tuple[str, ...]]] = {
    "lemaire": {
        ("convention", "spikingjelly"): ("memory_breakpoints.*.capacity_bytes", "memory_breakpoints.*.pj_per_byte"),
        ("convention", "qualia"): tuple(f"qualia.{key}" for key in _QUALIA),
    },
}
