"""SpikeSim costing: which convolutions are costed, their counts at the preset's crossbar
size, SpikingJelly's per-stage statistics and energies, and SpikeSim's area and latency.

A SpikeSim "stage" is a Conv2d layer, named by its scope, as in SpikingJelly. Per call, with
b = xbar_size, p = ceil(C_in/b) input tiles, q = ceil(C_out/b) output tiles and
sites = N * Ho * Wo (SpikeSimCounter):
    dense:  pe_cycles = p * q * sites                    energy = pe_cycles * pe_cycle(kh, kw)
    event:  patch = q * A * patch_control   xbar = q * sum_t R_t * xbar_row(c_t)
            neuron = p * Z * neuron_pj      (A, R_t, Z from the spike map; a non-binary x
            falls back to the dense A = sites*p, R_t = sites*c_t*kh*kw, Z = q*sites)
By default every call is costed with its own geometry; compat="spikingjelly" costs a stage's
summed statistics with its first call's geometry, as SpikingJelly does (they differ only for
a stage called with inconsistent shapes).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from spiketrace.analyze.energy.spikesim.mapper import GEOMETRY  # noqa: F401 (the call geometry a stage's calls share)

ROW_DIVISOR = 8.0  # SpikingJelly's _SPIKESIM_XBAR_ROW_DIVISOR: SpikeSim's (xbar_size / 8) factor

TRAINING_MESSAGE = "SpikeSim energy only covers forward inference; call model.eval() before profiling."
EMPTY_MESSAGE = "No supported Conv2d forward inference stages were profiled by SpikeSim energy."


def reject_message(key: str, row) -> str:
    scope = row.scope
    if key == "transposed-conv":
        return ("SpikeSim energy only covers original SpikeSim Conv2d inference stages; transposed "
                f"convolutions are outside scope: {scope}.")
    if key == "outside-scope":
        return f"SpikeSim energy only covers Conv2d forward inference stages from nn.Conv2d modules: {scope}."
    if key == "grouped-conv":
        return f"SpikeSim event energy does not support grouped/depthwise convolutions: {scope}."
    if key == "conv-rank":
        shapes = [tuple(int(v) for v in s) if s is not None else None for s in (row.x_shape, row.w_shape, row.out_shape)]
        return (f"SpikeSim event energy only supports Conv2d-like calls, but got x.shape={shapes[0]}, "
                f"w.shape={shapes[1]}, out.shape={shapes[2]}.")
    raise KeyError(key)


def mismatch_message(scope: str, spikingjelly: bool) -> str:
    tail = ("runtime energy is accumulated across calls anyway." if spikingjelly
            else "each call is costed with its own geometry.")
    return f"SpikeSim stage '{scope}' was invoked with inconsistent shapes; {tail}"


def classify(calls: pd.DataFrame, refuse_grad: bool) -> pd.DataFrame:
    """reject (SpikeSimCounter's warning key, '' when costed) and why, in its check order."""
    outside = ((calls["conv2d_modules"] != 1) | calls["conv_training"].astype(bool)
               | calls["in_backward"].astype(bool) | (calls["grad_enabled"].astype(bool) & refuse_grad))
    reject = np.select([calls["transposed"].astype(bool), outside, calls["groups"] != 1, ~calls["four_d"]],
                       ["transposed-conv", "outside-scope", "grouped-conv", "conv-rank"], "")
    why = np.select(
        [calls["transposed"].astype(bool), calls["conv2d_modules"] != 1, calls["conv_training"].astype(bool),
         calls["in_backward"].astype(bool), calls["grad_enabled"].astype(bool) & refuse_grad, calls["groups"] != 1,
         ~calls["four_d"]],
        ["transposed", "not exactly one nn.Conv2d active", "training", "backward", "grad enabled", "grouped",
         "not 4-D"], "")
    return calls.assign(reject=reject, why=why)


def tile_channels(channels: int, xbar_size: int) -> list[int]:
    return [min(xbar_size, channels - start) for start in range(0, channels, xbar_size)]


def call_counts(calls: pd.DataFrame, b: int, event_calls: pd.DataFrame | None, event_tiles: pd.DataFrame | None):
    """Per costed call: dense and active counts at crossbar size b; and per (call, tile): the
    tile's channels and its dense and active rows. `event_calls`/`event_tiles` (None in dense
    mode) hold the spike-map counts of the event-driven calls."""
    sites = calls["batch"] * calls["out_height"] * calls["out_width"]
    taps = calls["kernel_h"] * calls["kernel_w"]
    in_tiles = -(-calls["in_channels"] // b)
    out_tiles = -(-calls["out_channels"] // b)
    counts = pd.DataFrame({
        "sites": sites, "in_tiles": in_tiles, "out_tiles": out_tiles, "pe_cycles": in_tiles * out_tiles * sites,
        "dense_patch_tiles": sites * in_tiles, "dense_rows": sites * calls["in_channels"] * taps,
        "dense_output_tile_sites": out_tiles * sites,
    }, index=calls.index)
    event = np.zeros(len(calls), dtype=bool) if event_calls is None else calls.index.isin(event_calls.index)
    counts["event_driven"] = event
    call = np.repeat(calls.index.to_numpy(), in_tiles.to_numpy())
    first_row = np.repeat(np.cumsum(in_tiles.to_numpy()) - in_tiles.to_numpy(), in_tiles.to_numpy())
    tile = np.arange(len(call)) - first_row
    channels = np.minimum(b, calls["in_channels"].to_numpy().repeat(in_tiles.to_numpy()) - tile * b)
    tiles = pd.DataFrame({"call": call, "tile": tile, "channels": channels,
                          "dense_rows": sites.to_numpy().repeat(in_tiles.to_numpy()) * channels
                          * taps.to_numpy().repeat(in_tiles.to_numpy())})
    tiles["rows"] = tiles["dense_rows"]
    counts["patch_tiles"] = counts["dense_patch_tiles"]
    counts["rows"] = counts["dense_rows"]
    counts["output_tile_sites"] = counts["dense_output_tile_sites"]
    if event_calls is not None and event_tiles is not None and event.any():  # (both None in dense mode)
        chosen = event_calls.loc[calls.index[event]]
        counts.loc[chosen.index, "patch_tiles"] = chosen["active_patch_tiles"]
        counts.loc[chosen.index, "output_tile_sites"] = out_tiles[chosen.index] * chosen["active_sites"]
        active = event_tiles[event_tiles["call"].isin(chosen.index)].set_index(["call", "tile"])["rows"]
        key = pd.MultiIndex.from_arrays([tiles["call"], tiles["tile"]])
        replace = key.isin(active.index)
        tiles.loc[replace, "rows"] = active.reindex(key[replace]).to_numpy()
        counts.loc[chosen.index, "rows"] = tiles[tiles["call"].isin(chosen.index)].groupby("call")["rows"].sum()
    return counts.astype({c: "int64" for c in counts.columns if c != "event_driven"}), tiles


def patch_control_pj(costs) -> float:
    b = float(costs.xbar_size)
    return (costs.htree_pj + costs.mem_fetch_pj + costs.tile_buffer_pj + (b / ROW_DIVISOR) * 16.0 * costs.sub_pj
            + (b / ROW_DIVISOR) * costs.temp_buffer_pj + (b / ROW_DIVISOR) * (b / ROW_DIVISOR) * (costs.adc_pj + costs.mux_pj))


def xbar_array_pj(costs) -> float:
    return costs.rram_xbar_pj if costs.device == "rram" else costs.sram_xbar_pj


def pe_cycle_pj(costs, kernel_h, kernel_w):
    """SpikeSim's PE_cycle_energy with the layer's own kernel (works on arrays)."""
    return (patch_control_pj(costs) + costs.neuron_pj
            + (costs.xbar_size / ROW_DIVISOR) * kernel_h * kernel_w * xbar_array_pj(costs))


def xbar_row_pj(costs, channels):
    """Energy of one active crossbar row of a tile of `channels` channels (padded to the crossbar)."""
    b = costs.xbar_size
    return (xbar_array_pj(costs) / ROW_DIVISOR) * (np.ceil(np.asarray(channels) / b) * b / np.asarray(channels, float))


def per_call_energy(calls: pd.DataFrame, counts: pd.DataFrame, tiles: pd.DataFrame, costs) -> pd.DataFrame:
    """pJ per costed call and component, each call with its own geometry."""
    if costs.activity_mode == "dense":
        pe = counts["pe_cycles"] * pe_cycle_pj(costs, calls["kernel_h"], calls["kernel_w"])
        return pd.DataFrame({"pe_cycle_pj": pe.astype(float)}, index=calls.index)
    out_tiles = counts["out_tiles"].reindex(tiles["call"]).to_numpy()
    row_pj = tiles["rows"].to_numpy() * xbar_row_pj(costs, tiles["channels"].to_numpy()) * out_tiles
    xbar = pd.Series(row_pj, index=tiles["call"].to_numpy()).groupby(level=0).sum().reindex(calls.index, fill_value=0.0)
    return pd.DataFrame({
        "patch_control_pj": counts["out_tiles"] * counts["patch_tiles"] * patch_control_pj(costs),
        "xbar_pj": xbar.astype(float),
        "neuron_pj": counts["in_tiles"] * counts["output_tile_sites"] * costs.neuron_pj,
    }, index=calls.index).astype(float)


def energy_by_call_group(calls: pd.DataFrame, call_pj: pd.Series, stage_pj: dict[str, float]):
    """(pJ per recorder step, pJ per rank) of the costed calls. Each call's energy with its
    own geometry is its share of its stage's energy; that equals the stage's energy except
    under compat, where SpikingJelly costs a stage's summed counts with its first call's
    geometry, so the shares are scaled to the stage's energy and still add up to it."""
    if not len(calls):
        return {}, {}
    stage_sum = call_pj.groupby(calls["scope"]).transform("sum")
    stage_total = calls["scope"].map(stage_pj).astype(float)
    share = (call_pj * (stage_total / stage_sum.where(stage_sum != 0))).fillna(0.0)
    return tuple({str(int(k)): float(v) for k, v in share.groupby(calls[column]).sum().items()}
                 for column in ("step", "rank"))


def _by_tile(lists: list[list[int]]) -> list[int] | None:
    """SpikeSimCounter's running per-tile sum: a call whose tile count differs from the list's
    sets it to None, and the next call starts a fresh list."""
    total: list[int] | None = None
    for values in lists:
        if total is None:
            total = [0] * len(values)
        elif len(total) != len(values):
            total = None
            continue
        total = [a + int(v) for a, v in zip(total, values)]
    return total


def stage_tables(calls, counts, tiles, costs):
    """SpikingJelly's get_stage_stats() and get_stage_metadata(), in first-call order."""
    stats, metadata = {}, {}
    for scope, group in calls.groupby("scope", sort=False):
        first = group.iloc[0]
        c = counts.loc[group.index]
        uniform = group["in_channels"].nunique() == 1
        by_tile: dict[str, list[int] | None] = {}
        for column in ("rows", "dense_rows"):
            if uniform:
                by_tile[column] = [int(v) for v in tiles[tiles["call"].isin(group.index)].groupby("tile")[column].sum()]
            else:  # rare: the stage's calls have different numbers of input tiles
                lists = tiles[tiles["call"].isin(group.index)].groupby("call", sort=False)[column].apply(list)
                by_tile[column] = _by_tile([lists[i] for i in group.index])
        stats[scope] = {
            "dense_pe_cycle_count": int(c["pe_cycles"].sum()),
            "active_patch_tile_count": int(c["patch_tiles"].sum()), "active_row_count": int(c["rows"].sum()),
            "active_row_count_by_tile": by_tile["rows"],
            "active_output_tile_site_count": int(c["output_tile_sites"].sum()),
            "dense_patch_tile_count": int(c["dense_patch_tiles"].sum()), "dense_row_count": int(c["dense_rows"].sum()),
            "dense_row_count_by_tile": by_tile["dense_rows"],
            "dense_output_tile_site_count": int(c["dense_output_tile_sites"].sum()),
        }
        metadata[scope] = {
            "scope": scope, "in_channels": int(first.in_channels), "out_channels": int(first.out_channels),
            "kernel_size": (int(first.kernel_h), int(first.kernel_w)),
            "stride": (int(first.stride_h), int(first.stride_w)), "padding": (int(first.padding_h), int(first.padding_w)),
            "dilation": (int(first.dilation_h), int(first.dilation_w)),
            "input_shape": tuple(int(v) for v in first.x_shape), "output_shape": tuple(int(v) for v in first.out_shape),
            "out_channel_tiles": int(-(-first.out_channels // costs.xbar_size)),
            "input_tile_channels": tile_channels(int(first.in_channels), costs.xbar_size),
            "total_calls": len(group), "event_driven_calls": int(c["event_driven"].sum()),
            "dense_fallback_calls": int((~c["event_driven"]).sum()),
            "shape_mismatch_detected": bool(group["mismatch"].any()),
        }
    return stats, metadata


def stage_energy_spikingjelly(stats: dict, metadata: dict, costs) -> dict[str, float]:
    """compute_spikesim_{dense,event}_energy_breakdown of one stage's summed statistics."""
    if costs.activity_mode == "dense":
        total = float(stats["dense_pe_cycle_count"]) * float(pe_cycle_pj(costs, *metadata["kernel_size"]))
        return {"pe_cycle_pj": total, "total_pj": total}
    q = float(metadata["out_channel_tiles"])
    patch = q * float(stats["active_patch_tile_count"]) * patch_control_pj(costs)
    by_tile = stats["active_row_count_by_tile"]
    if by_tile is None:
        # SpikingJelly's metadata always has input_tile_channels, so its "no per-tile counts"
        # branch is unreachable and its get_report() raises instead
        raise ValueError("active_row_count_by_tile and input_tile_channels must either both be present or both "
                         f"be absent. (SpikingJelly 2.0.0 fails on stage {metadata['scope']!r}, whose calls have "
                         "different numbers of input tiles; cost without compat='spikingjelly')")
    xbar = q * sum(float(r) * float(xbar_row_pj(costs, c)) for r, c in zip(by_tile, metadata["input_tile_channels"]))
    p = math.ceil(metadata["in_channels"] / costs.xbar_size)
    neuron = float(p) * float(stats["active_output_tile_site_count"]) * costs.neuron_pj
    return {"patch_control_pj": patch, "xbar_pj": xbar, "neuron_pj": neuron, "total_pj": patch + xbar + neuron}


def layers(calls: pd.DataFrame) -> pd.DataFrame:
    """One row per costed stage, in first-call order: its first call's geometry and its
    frames (samples x time steps it processed: the batch dimension summed over calls)."""
    grouped = calls.groupby("scope", sort=False)
    first = grouped.first()
    return pd.DataFrame({
        "in_channels": first["in_channels"], "out_channels": first["out_channels"],
        "in_pixels": first["height"] * first["width"], "out_pixels": first["out_height"] * first["out_width"],
        "kernel_taps": first["kernel_h"] * first["kernel_w"], "frames": grouped["batch"].sum(),
    })


def area_um2(table: pd.DataFrame, costs) -> dict[str, float]:
    """SpikeSim's compute_area (ela_spikesim.py, c2627bc), its lists taken from the stages.
    PEs are sized for the largest kernel of the network (SpikeSim has one global k)."""
    a, b = costs.area, costs.xbar_size
    xbar = a.rram_xbar_um2 if costs.device == "rram" else a.sram_xbar_um2
    taps = int(table["kernel_taps"].max()) if len(table) else 0
    pe = taps * xbar + (b / 8) * (a.adc_um2 + a.mux_um2)
    pes = int((-(-table["in_channels"] // b) * -(-table["out_channels"] // b)).sum())
    tiles = -(-pes // a.pe_per_tile)
    tile = (b / 8) * a.sub_um2 + a.temp_buffer_um2 + a.sram_bit_um2 * a.tile_buffer_bits + a.pe_per_tile * pe + a.htree_um2
    element = a.sram_bit_um2 * a.buffer_bits_per_element
    inputs = float((table["in_channels"] * table["in_pixels"]).sum()) * element
    held = table.iloc[:a.neuron_memory_layers]
    neurons = float((held["out_channels"] * held["out_pixels"]).sum()) * element
    return {"total_um2": tile * tiles + inputs + neurons, "tiles_um2": tile * tiles, "input_buffer_um2": inputs,
            "neuron_memory_um2": neurons, "tile_um2": tile, "pe_um2": pe, "pe_count": pes, "tile_count": tiles}


def latency(table: pd.DataFrame, costs) -> dict:
    """SpikeSim's latency_gen: layer i starts once layer i-1 has produced pipeline_fraction of
    its C_out*Ho*Wo outputs per frame; the network's latency is the last layer's halt, in PE
    cycles of pe_cycle_clocks clocks. SpikeSim's T is each layer's frames here."""
    lat = costs.latency
    outputs = (table["out_channels"] * table["out_pixels"]).to_numpy(dtype=np.int64)
    frames = table["frames"].to_numpy(dtype=np.int64)
    checkpoints = np.array([int(lat.pipeline_fraction * o) for o in outputs], dtype=np.int64) * frames
    before = np.concatenate([[0], np.cumsum(checkpoints)[:-1]]).astype(np.int64)
    halts = outputs * frames + before
    cycle_ns = lat.pe_cycle_clocks * (1000.0 / lat.clock_mhz)
    cycles = int(halts[-1]) if len(halts) else 0
    return {"pe_cycle_ns": cycle_ns, "cycles": cycles, "latency_ns": cycles * cycle_ns,
            "by_stage": {str(s): {"start_cycle": int(1 + p), "end_cycle": int(h)}
                         for s, p, h in zip(table.index, before, halts)}}


def extra_warnings(costed: pd.DataFrame, unsupported: list[dict]) -> list[str]:
    """Default mode's warnings beside SpikingJelly's: grad-enabled convs costed as inference,
    Linear layers left out."""
    extra = []
    grad = costed[costed["grad_enabled"].astype(bool)]
    if len(grad):
        extra.append(f"SpikeSim: {len(grad)} Conv2d calls (first: {grad['scope'].iloc[0]}) ran with grad enabled; "
                     "they are costed as inference (SpikingJelly refuses them: strict=True or compat='spikingjelly').")
    for u in unsupported:
        if u["kind"] == "linear":
            extra.append(f"SpikeSim does not model Linear layers; not costed: {u['scope']} "
                         f"({u['calls']} calls, {u['macs']} MACs).")
    return extra
