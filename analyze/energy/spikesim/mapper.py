"""SpikeSim mapper: a trace's convolutions, neurons and Linear layers as preset-free activity.

One row per dispatched `aten.convolution.default` of the selection, with what SpikingJelly
2.0.0's SpikeSimCounter reads when the op runs: the scope it is recorded under (the deepest
of the tracker's parents), how many nn.Conv2d modules were active and whether that conv was
training, grad mode, transposition, groups, the x / w / out shapes, stride, padding and
dilation, and whether x was binary. Whether a call is costed is decided by the costing
(report.py, formulas.py), because compat and strict change it.

Event mode needs, per call, the spike map of x split into crossbar-row tiles of
`xbar_size` channels: a preset parameter. So the activity keeps x bit-packed, as the trace
stores it (packed_inputs, kept with Recorder(keep_binary_inputs=True)), and
`Activity.event_counts(xbar_size)` unpacks it with numpy once per crossbar size; re-costing
any number of presets of one size maps and unpacks once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from spiketrace.analyze import neurons
from spiketrace.analyze.counters import _ignore_names, _where
from spiketrace.analyze.counters.engine import ignored_scopes_sql
from spiketrace.analyze.counters.fused_attention import ENCODER_LAYER
from spiketrace.analyze.energy import stateful
from spiketrace.analyze.energy.synaptic_layers import uncosted_notes

MODEL = "spikesim"  # its name for analyze/neurons.py
CONV2D_CLASS = "torch.nn.modules.conv.Conv2d"
LINEAR_CLASS = "torch.nn.modules.linear.Linear"
# SpikingJelly's neurons (BaseNode, SimpleBaseNode), as its counter recognises them; the
# snnTorch/Norse ones of analyze/neurons.py are flagged apart (costed in default mode only).
NEURON_CLASSES = tuple(neurons.classes(MODEL, "spikingjelly"))
# isinstance() targets of SpikingJelly's _SUPPORTED_SPIKESIM_NEURONS (subclasses count too).
IF_LIF_CLASSES = ("spikingjelly.activation_based.neuron.integrate_and_fire.IFNode",
                  "spikingjelly.activation_based.neuron.lif.LIFNode",
                  "spikingjelly.activation_based.neuron.integrate_and_fire.SimpleIFNode",
                  "spikingjelly.activation_based.neuron.lif.SimpleLIFNode")
KEEP_SETTING = "keep_binary_inputs"
# Unpack at most this many spike values at a time (bytes of uint8), so memory stays bounded.
UNPACK_CHUNK = 1 << 25


def _quote(text: str) -> str:
    return "'" + str(text).replace("'", "''") + "'"


def _list(names) -> str:
    return "[" + ", ".join(_quote(n) for n in names) + "]"


_DOTS = "(length({n}) - length(replace({n}, '.', '')))"
# SpikeSimCounter._leaf_scope: the deepest non-Global parent (most dots, then the longest name).
LEAF_SCOPE = f"""CASE WHEN len(list_filter(s.parents, lambda p: p <> 'Global')) = 0 THEN 'Global'
    ELSE list_reduce(list_filter(s.parents, lambda p: p <> 'Global'), lambda a, b: CASE
        WHEN {_DOTS.format(n='b')} > {_DOTS.format(n='a')}
          OR ({_DOTS.format(n='b')} = {_DOTS.format(n='a')} AND length(b) > length(a)) THEN b ELSE a END) END"""


def _dim(shape: str, i: int) -> str:
    return f"CASE WHEN four_d THEN {shape}[{i}] ELSE 0 END"


def _pair(values: str, i: int) -> str:
    return f"coalesce(CASE WHEN len({values}) = 1 THEN {values}[1] ELSE {values}[{i}] END, 0)"


CALLS_SQL = """
WITH conv AS (
    SELECT rank, seq, step, stage, grad_enabled, in_backward, scope_id,
           json_extract(args, '$[3]')::BIGINT[] AS stride, json_extract(args, '$[4]')::BIGINT[] AS padding,
           json_extract(args, '$[5]')::BIGINT[] AS dilation, json_extract(args, '$[6]')::BOOLEAN AS transposed,
           json_extract(args, '$[8]')::BIGINT AS groups
    FROM events WHERE op = 'aten.convolution.default' AND {where}
      AND NOT EXISTS (SELECT 1 FROM ({ignored}) i WHERE i.rank = events.rank AND i.scope_id = events.scope_id)
),
uses AS (
    SELECT u.rank, u.seq,
           any_value(u.tensor_id) FILTER (WHERE u.role = 'arg' AND u.position = 0 AND u.item IS NULL) AS x_id,
           any_value(u.tensor_id) FILTER (WHERE u.role = 'arg' AND u.position = 1 AND u.item IS NULL) AS w_id,
           any_value(u.tensor_id) FILTER (WHERE u.role = 'out' AND u.position = 0 AND u.item IS NULL) AS out_id
    FROM event_tensors u JOIN conv c ON c.rank = u.rank AND c.seq = u.seq
    GROUP BY u.rank, u.seq
),
active AS (
    SELECT a.rank, a.scope_id, count(*) AS conv2d_modules, min(a.module_id) AS conv_module_id
    FROM (SELECT rank, scope_id, UNNEST(active_modules) AS module_id FROM scopes) a
    JOIN modules m ON m.rank = a.rank AND m.module_id = a.module_id AND list_contains(m.mro, '{conv2d}')
    GROUP BY a.rank, a.scope_id
),
scoped AS (
    SELECT s.rank, s.scope_id, {leaf} AS scope FROM scopes s
),
calls AS (
    SELECT c.*, s.scope, n.scope_class, coalesce(a.conv2d_modules, 0) AS conv2d_modules, a.conv_module_id,
           x.shape AS x_shape, w.shape AS w_shape, o.shape AS out_shape, x.is01 AS x_binary, o.numel AS out_numel,
           coalesce(len(x.shape) = 4 AND len(w.shape) = 4 AND len(o.shape) = 4, false) AS four_d,
           -- the MACs the op performs, for listing a call that is not costed
           coalesce(CASE WHEN c.transposed THEN x.numel ELSE o.numel END
                    * list_reduce(w.shape[2:], lambda a, b: a * b), 0) AS macs
    FROM conv c JOIN uses u ON u.rank = c.rank AND u.seq = c.seq
    JOIN scoped s ON s.rank = c.rank AND s.scope_id = c.scope_id
    LEFT JOIN (SELECT rank, coalesce(tracker_name, path) AS scope, any_value(class_name) AS scope_class
               FROM modules GROUP BY ALL) n ON n.rank = c.rank AND n.scope = s.scope
    LEFT JOIN active a ON a.rank = c.rank AND a.scope_id = c.scope_id
    LEFT JOIN tensor_states x ON x.rank = c.rank AND x.tensor_id = u.x_id
    LEFT JOIN tensor_states w ON w.rank = c.rank AND w.tensor_id = u.w_id
    LEFT JOIN tensor_states o ON o.rank = c.rank AND o.tensor_id = u.out_id
)
SELECT c.*, coalesce(h.training, false) AS conv_training,
       {batch} AS batch, {x_channels} AS x_channels, {height} AS height, {width} AS width,
       {out_channels} AS out_channels, {in_channels} AS in_channels, {kernel_h} AS kernel_h,
       {kernel_w} AS kernel_w, {out_height} AS out_height, {out_width} AS out_width,
       {stride_h} AS stride_h, {stride_w} AS stride_w, {padding_h} AS padding_h, {padding_w} AS padding_w,
       {dilation_h} AS dilation_h, {dilation_w} AS dilation_w
FROM calls c
ASOF LEFT JOIN module_events h ON h.rank = c.rank AND h.module_id = c.conv_module_id AND h.seq <= c.seq
ORDER BY c.rank, c.seq
"""
GEOMETRY_SQL = {
    "batch": _dim("x_shape", 1), "x_channels": _dim("x_shape", 2), "height": _dim("x_shape", 3),
    "width": _dim("x_shape", 4), "out_channels": _dim("w_shape", 1), "in_channels": _dim("w_shape", 2),
    "kernel_h": _dim("w_shape", 3), "kernel_w": _dim("w_shape", 4), "out_height": _dim("out_shape", 3),
    "out_width": _dim("out_shape", 4), "stride_h": _pair("stride", 1), "stride_w": _pair("stride", 2),
    "padding_h": _pair("padding", 1), "padding_w": _pair("padding", 2), "dilation_h": _pair("dilation", 1),
    "dilation_w": _pair("dilation", 2),
}
NO_SCOPES = "SELECT NULL::INTEGER AS rank, NULL::INTEGER AS scope_id WHERE false"
PACKED_SQL = """
SELECT p.bits, p.shape IS NOT DISTINCT FROM w.x_shape OR p.shape IS NULL AS same_shape, p.shape, w.rank, w.seq
FROM spikesim_wanted w LEFT JOIN packed_inputs p ON p.rank = w.rank AND p.seq = w.seq AND p.position = 0
ORDER BY w.call
"""

# Module forward calls of the selection: Linear layers (not modelled) and neurons (checked). An
# snnTorch/Norse neuron is an IF/LIF neuron when its model has one potential (Leaky, RLeaky,
# LIFBoxCell), not when it integrates a synaptic current too (Synaptic, Alpha, LIFCell, LIF).
MODULE_CALLS_SQL = """
SELECT m.rank, m.module_id, m.path, m.class_name, m.parent_id IS NULL AS is_root,
       coalesce(m.tracker_name, m.path) AS scope,
       list_contains(m.mro, '{linear}') AS linear,
       list_has_any(m.mro, {neurons}) AS neuron,
       list_has_any(m.mro, {if_lif}) AS if_lif,
       coalesce(f.framework <> 'spikingjelly', false) AS foreign_neuron,
       coalesce(f.framework <> 'spikingjelly' AND f.kind IN ('IF', 'LIF'), false) AS foreign_if_lif,
       (m.attributes->>'in_features')::BIGINT AS in_features,
       count(pre.seq) AS calls, bool_or(pre.training) AS training,
       coalesce(sum(o.numel), 0)::BIGINT AS output_elements
FROM modules m
LEFT JOIN (SELECT * FROM module_events WHERE kind = 'forward_pre' AND {where}) pre
       ON pre.rank = m.rank AND pre.module_id = m.module_id
LEFT JOIN module_events post ON post.rank = pre.rank AND post.module_id = pre.module_id
       AND post.call_index = pre.call_index AND post.kind = 'forward_post'
LEFT JOIN tensor_states o ON o.rank = post.rank AND o.tensor_id = post.outputs[1]
LEFT JOIN ({foreign}) f ON f.rank = m.rank AND f.module_id = m.module_id
WHERE m.in_model {not_ignored}
GROUP BY ALL
ORDER BY m.rank, m.module_id
"""


@dataclass
class Activity:
    """Preset-independent SpikeSim activity of a trace selection."""

    calls: pd.DataFrame  # one row per aten.convolution of the selection (CALLS_SQL)
    modules: pd.DataFrame  # one row per module of the model: calls, output elements, kind flags
    packed: pd.Series  # bit-packed x of each binary-input 4-D call (calls' index), None where absent
    trace_path: str = ""
    keeps_binary_inputs: bool = False  # the capture setting, from the manifests
    warnings: list[str] = field(default_factory=list)
    _event_cache: dict[int, tuple[pd.DataFrame, pd.DataFrame]] = field(default_factory=dict, repr=False)

    def event_counts(self, xbar_size: int) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Per call whose x is packed (calls' index): active_patch_tiles (A) and active_sites
        (output sites with a spike in some tile's patch); per (call, tile): rows (R_t, the
        spikes of tile t summed over every output's receptive field). Cached per size."""
        if xbar_size not in self._event_cache:
            self._event_cache[xbar_size] = spike_event_counts(self.calls, self.packed, xbar_size)
        return self._event_cache[xbar_size]


def activity(trace, *, stage=None, step=None, rank=None, ignore_modules=(), compat=None, strict=False,
             packed_inputs: bool = True, recompute=None, **options) -> Activity:
    """Map the trace's Conv2d calls (and neurons, Linear layers) of `stage`, `step`, `rank` (a
    value or a list each; all when None). packed_inputs=False skips loading the spike maps
    (dense mode only then). `recompute="exclude"` leaves out the calls activation checkpointing
    recomputed during backward (included by default: they ran); "only" keeps just them."""
    if options:
        raise TypeError(f"the spikesim model takes no options {sorted(options)}")
    if compat not in (None, "spikingjelly"):
        raise ValueError(f"compat must be None or 'spikingjelly', got {compat!r}")
    where = _where(stage=stage, step=step, rank=rank, recompute=recompute)
    names = _ignore_names(ignore_modules)
    listed = "[" + ", ".join("'" + n.replace("'", "''") + "'" for n in names) + "]"
    not_ignored = "" if not names else f"""AND NOT EXISTS (SELECT 1 FROM modules a WHERE a.rank = m.rank AND a.in_model
        AND (m.path = a.path OR starts_with(m.path, a.path || '.'))
        AND (list_has_any(a.mro, {listed}) OR list_contains({listed}, a.class_name) OR list_contains({listed}, a.path)))"""
    mapped = map_trace(trace, where=where, ignore_scopes_sql=ignored_scopes_sql(names, None) if names else None,
                       not_ignored_modules=not_ignored, load_packed=packed_inputs)
    mapped.warnings = stateful.warnings(trace, MODEL, compat, names, where=where)
    # torch's fused TransformerEncoderLayer runs its Linear layers without calling them: named,
    # as the Linear layers a call shows are
    mapped.warnings += uncosted_notes(trace, where, (ENCODER_LAYER.removesuffix(".default") + "%",))
    return mapped


def map_trace(trace, *, where: str, ignore_scopes_sql: str | None, not_ignored_modules: str,
              load_packed: bool = True) -> Activity:
    calls = trace.sql(CALLS_SQL.format(where=where, ignored=ignore_scopes_sql or NO_SCOPES, conv2d=CONV2D_CLASS,
                                       leaf=LEAF_SCOPE, **GEOMETRY_SQL))
    modules = trace.sql(MODULE_CALLS_SQL.format(
        where=where, linear=LINEAR_CLASS, neurons=_list(NEURON_CLASSES), if_lif=_list(IF_LIF_CLASSES),
        not_ignored=not_ignored_modules, foreign=neurons.table_sql(MODEL)))
    packed = pd.Series([None] * len(calls), index=calls.index, dtype=object)
    wanted = calls[calls["x_binary"].fillna(False).astype(bool) & calls["four_d"]]
    if load_packed and len(wanted):
        trace.con.register("spikesim_wanted", pd.DataFrame({"call": wanted.index, "rank": wanted["rank"],
                                                            "seq": wanted["seq"], "x_shape": wanted["x_shape"]}))
        rows = trace.con.sql(PACKED_SQL).to_arrow_table()
        trace.con.unregister("spikesim_wanted")
        same = rows.column("same_shape").to_numpy(zero_copy_only=False)
        if not same.all():
            bad = int(np.flatnonzero(~same)[0])
            raise ValueError(f"{trace.path}: packed_inputs row seq={rows.column('seq')[bad]} (rank "
                             f"{rows.column('rank')[bad]}) has shape {rows.column('shape')[bad]}, but the "
                             f"convolution's x is {list(wanted['x_shape'].iloc[bad])}")
        packed.loc[wanted.index] = rows.column("bits").to_pylist()
    keeps = any(bool(m.get("settings", {}).get(KEEP_SETTING)) for m in trace.manifests.values())
    return Activity(calls, modules, packed, str(trace.path), keeps)


def _unpack(bits: list[bytes], shape: tuple[int, ...], chunk: pd.DataFrame) -> np.ndarray:
    """(E, *shape) uint8 0/1 values of E row-major, MSB-first packed tensors of one shape."""
    numel = int(np.prod(shape))
    nbytes = -(-numel // 8)
    joined = b"".join(bits)
    if len(joined) != nbytes * len(bits):
        bad = next(i for i, raw in enumerate(bits) if len(raw) != nbytes)
        raise ValueError(f"packed_inputs row seq={chunk['seq'].iloc[bad]} (rank {chunk['rank'].iloc[bad]}): "
                         f"{len(bits[bad])} bytes of bits, expected {nbytes} for shape {list(shape)}")
    raw = np.frombuffer(joined, dtype=np.uint8).reshape(len(bits), nbytes)
    return np.unpackbits(raw, axis=1, count=numel).reshape(len(bits), *shape)


def occupancy(spikes: np.ndarray, xbar_size: int, kernel, stride, padding, dilation, out_hw) -> np.ndarray:
    """occ[e, n, t, oh, ow]: spikes of channel tile t (xbar_size channels, the last one
    zero-padded) inside output (oh, ow)'s kh x kw receptive field, as SpikeSimCounter's
    grouped ones-kernel conv2d of the per-tile channel sums computes it."""
    channels = spikes.shape[2]
    counts = np.add.reduceat(spikes, np.arange(0, channels, xbar_size), axis=2, dtype=np.int32)
    (ph, pw), (sh, sw), (dh, dw), (oh, ow) = padding, stride, dilation, out_hw
    padded = np.pad(counts, ((0, 0), (0, 0), (0, 0), (ph, ph), (pw, pw)))
    occ = np.zeros(counts.shape[:3] + (oh, ow), dtype=np.int32)
    for i in range(kernel[0]):  # one strided slice per kernel tap, over every call and tile at once
        for j in range(kernel[1]):
            occ += padded[..., i * dh: i * dh + sh * (oh - 1) + 1: sh, j * dw: j * dw + sw * (ow - 1) + 1: sw]
    return occ


GEOMETRY = ["batch", "x_channels", "height", "width", "kernel_h", "kernel_w", "stride_h", "stride_w",
            "padding_h", "padding_w", "dilation_h", "dilation_w", "out_height", "out_width"]


def spike_event_counts(calls: pd.DataFrame, packed: pd.Series, xbar_size: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Event counts of every call whose x is packed, for one crossbar size: calls grouped by
    geometry (the calls of one layer share it), unpacked in bounded chunks."""
    per_call, per_tile = [], []
    for geometry, group in calls[packed.notna()].groupby(GEOMETRY, sort=False):
        n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow = (int(v) for v in geometry)
        step = max(1, UNPACK_CHUNK // max(1, n * c * h * w))
        for start in range(0, len(group), step):
            chunk = group.iloc[start:start + step]
            spikes = _unpack(list(packed[chunk.index]), (n, c, h, w), chunk)
            occ = occupancy(spikes, xbar_size, (kh, kw), (sh, sw), (ph, pw), (dh, dw), (oh, ow))
            active = occ > 0
            per_call.append(pd.DataFrame({
                "active_patch_tiles": active.sum(axis=(1, 2, 3, 4), dtype=np.int64),
                "active_sites": active.any(axis=2).sum(axis=(1, 2, 3), dtype=np.int64),
            }, index=chunk.index))
            rows = occ.sum(axis=(1, 3, 4), dtype=np.int64)  # (calls, tiles)
            tiles = rows.shape[1]
            per_tile.append(pd.DataFrame({
                "call": np.repeat(chunk.index.to_numpy(), tiles), "tile": np.tile(np.arange(tiles), len(chunk)),
                "rows": rows.reshape(-1),
            }))
    calls_frame = pd.concat(per_call) if per_call else pd.DataFrame(
        {"active_patch_tiles": pd.Series([], dtype="int64"), "active_sites": pd.Series([], dtype="int64")})
    tiles_frame = pd.concat(per_tile, ignore_index=True) if per_tile else pd.DataFrame(
        {"call": pd.Series([], dtype="int64"), "tile": pd.Series([], dtype="int64"), "rows": pd.Series([], dtype="int64")})
    return calls_frame, tiles_frame
