"""The paper convention's report (analyze/energy/paper.py) as what a paper pastes: an aligned
text table, Markdown, LaTeX (booktabs), CSV rows and the JSON document of
docs/paper_energy_json.md. Every output names the convention it was costed under: preset,
E_MAC and E_AC, mode, first-layer and non-spike rules, the matmul operand, the samples.

The tables show each layer per sample (a paper's numbers are per image); CSV and JSON hold
the totals over the recorded run beside them.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from spiketrace.analyze.present.safe_text import safe_line
from spiketrace.analyze.present.units import ENERGY_UNITS, energy_scale

HEADERS = ("Layer", "Kind", "Input", "Firing rate", "Dense MACs", "SOPs", "MACs", "Energy")
_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
_COUNT_SCALES = ((1e9, "G"), (1e6, "M"), (1e3, "K"))


def preset_line(report, preset: dict[str, Any]) -> str:
    costs = report.costs
    return f"{preset.get('name', '?')} (E_MAC {costs.e_mac_pj:g} pJ, E_AC {costs.e_ac_pj:g} pJ)"


def convention_lines(report, preset: dict[str, Any]) -> list[str]:
    """What the numbers were costed under, in words: one line each."""
    c = report.convention
    mode = ("rate: SOPs = input firing rate over the run x dense MACs over all time steps (Eq. 21)"
            if c["mode"] == "rate" else "event: SOPs = the (nonzero input, nonzero weight) products, as NeuroBench counts")
    first = c.get("first_layer_scope")
    if first is None:
        first_rule = "no synaptic layer"
    elif c.get("first_layer_input") == "spike":
        first_rule = f"{first}, whose input is spikes: charged SOPs"
    elif c["first_layer"] == "once":
        first_rule = f"{first}: MACs once (dense MACs / {c.get('time_steps')} time steps, {c.get('time_steps_source')})"
    else:
        first_rule = f"{first}: MACs per time step (its dense MACs over every call)"
    samples = report.samples
    return [f"convention: {c['name']}; preset {preset_line(report, preset)}",
            f"mode: {mode}",
            f"first layer: {first_rule}",
            "non-spike input of a later layer (residual sum, BN output, graded spike): "
            + ("charged as MACs" if c["non_spike"] == "mac" else "left out"),
            f"spike x spike matmul: the {c['matmul_rate']} operand's rate"
            + (" (both: the product of the two rates)" if c["matmul_rate"] == "both" else "")
            + (" (event mode counts pairs where both are nonzero)" if c["mode"] == "event" else ""),
            f"samples: {samples if samples is not None else 'unknown'} ({c['samples_source']})"]


def spread_line(report, unit: str | None = None) -> str:
    """The per-sample energy's mean and spread over the batches (in `unit`, or one chosen by the mean)."""
    t = report.test_set
    energy = t["energy_mj"]
    if not energy["batches"]:
        return "test set: no batch with a known number of samples"
    scale, unit = _energy_unit([energy["mean"] * 1e9], unit)
    scale /= 1e9  # mJ -> unit
    shown = [None if energy[k] is None else energy[k] / scale for k in ("mean", "std", "ci95_low", "ci95_high")]
    line = f"test set: {energy['batches']} batch(es), {t['samples']:g} samples; energy per sample {shown[0]:.6g} {unit}"
    if shown[1] is not None:
        line += f", std {shown[1]:.4g} {unit} across batches, 95% interval of the mean [{shown[2]:.6g}, {shown[3]:.6g}] {unit}"
    else:
        line += " (one batch: no spread)"
    if t.get("sampled_by_schedule"):
        line += f"; batches sampled by a schedule ({t['schedule']}): {t['steps_recorded']} recorded"
    return line


def _energy_unit(values, unit: str | None) -> tuple[float, str]:
    if unit in (None, "auto"):
        return energy_scale(values)
    unit = "µJ" if unit == "uJ" else unit
    return dict(ENERGY_UNITS)[unit], unit


def _count_scale(values) -> tuple[float, str]:
    top = max((abs(float(v)) for v in values if v is not None and math.isfinite(float(v))), default=0.0)
    return next(((scale, prefix) for scale, prefix in _COUNT_SCALES if top >= scale), (1.0, ""))


def per_sample_rows(report) -> pd.DataFrame:
    """One row per layer and a total: label, kind, input, rate and the per-sample counts and pJ
    (the run's totals when the samples are unknown)."""
    n = report.samples or 1
    layers = report.layers
    frame = pd.DataFrame({
        "layer": report.labels(),
        "kind": layers["kind"], "input": layers["input"], "rate": layers["input_firing_rate"],
        "dense_mac": layers["dense_mac"] / n, "sop": layers["sop"] / n, "mac": layers["mac"] / n,
        "energy_pj": layers["energy_pj"] / n})
    total = {"layer": "Total", "kind": "", "input": "", "rate": float("nan"),
             **{k: report.totals[t] / n for k, t in (("dense_mac", "dense_mac"), ("sop", "sop"), ("mac", "mac"),
                                                     ("energy_pj", "energy_pj"))}}
    return pd.concat([frame, pd.DataFrame([total])], ignore_index=True)


def _cells(rows: pd.DataFrame, unit: str | None, latex: bool = False) -> tuple[list[str], list[list[str]]]:
    """Headers (with their units) and text cells of per_sample_rows."""
    scale, shown_unit = _energy_unit(rows["energy_pj"], unit)
    heads = list(HEADERS)
    cells = [[r["layer"], r["kind"], r["input"], "" if pd.isna(r["rate"]) else f"{r['rate']:.4f}"]
             for _, r in rows.iterrows()]
    for position, column in ((4, "dense_mac"), (5, "sop"), (6, "mac")):
        count_scale, prefix = _count_scale(rows[column])
        heads[position] += f" ({prefix})" if prefix else ""
        for row, value in zip(cells, rows[column]):
            row.append(f"{value / count_scale:,.3f}" if count_scale > 1 else f"{value:,.1f}")
    energy_unit = shown_unit.replace("µ", "$\\mu$") if latex else shown_unit
    heads[7] += f" ({energy_unit})"
    for row, value in zip(cells, rows["energy_pj"]):
        row.append(f"{value / scale:.4g}")
    return heads, cells


def text_table(report, preset: dict[str, Any], unit: str | None = None, scope: str | None = None) -> str:
    rows = per_sample_rows(report)
    heads, cells = _cells(rows, unit)
    cells = [[safe_line(c) for c in row] for row in cells]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(heads)]
    left = (0, 1, 2)

    def line(values) -> str:
        return "  ".join(v.ljust(w) if i in left else v.rjust(w) for i, (v, w) in enumerate(zip(values, widths)))

    per = "per sample" if report.samples else "over the run (samples unknown)"
    per_sample = report.per_sample.get("energy_pj")
    total = per_sample if per_sample is not None else report.totals["energy_pj"]
    scale, shown = _energy_unit([total], unit)
    head = (f"paper energy{f' ({scope})' if scope else ''} under {safe_line(preset_line(report, preset))}: "
            f"{total / scale:.6g} {shown} {per}")
    body = [line(heads), line(["-" * w for w in widths]), *(line(r) for r in cells[:-1]),
            line(["-" * w for w in widths]), line(cells[-1])]
    return "\n".join([head, *body, "", *(safe_line(x) for x in convention_lines(report, preset)),
                      safe_line(spread_line(report, unit))])


def markdown(report, preset: dict[str, Any], unit: str | None = None) -> str:
    rows = per_sample_rows(report)
    heads, cells = _cells(rows, unit)

    def escape(text: str) -> str:
        return safe_line(text).replace("|", "\\|")

    align = ["---" if i < 3 else "---:" for i in range(len(heads))]
    lines = ["| " + " | ".join(heads) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(escape(c) for c in row) + " |" for row in cells[:-1]]
    lines.append("| " + " | ".join(f"**{escape(c)}**" if c else "" for c in cells[-1]) + " |")
    per = "per sample" if report.samples else "over the run (samples unknown)"
    notes = [f"Energy {per}. " + "; ".join(convention_lines(report, preset)) + ".", spread_line(report, unit) + "."]
    return "\n".join([*lines, "", *(escape(n) for n in notes)])


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in safe_line(text))


def latex(report, preset: dict[str, Any], unit: str | None = None) -> str:
    """A booktabs table (\\usepackage{booktabs}), its caption naming the convention."""
    rows = per_sample_rows(report)
    heads, cells = _cells(rows, unit, latex=True)
    per = "per sample" if report.samples else "over the run (samples unknown)"
    caption = latex_escape(f"Energy {per}. " + "; ".join(convention_lines(report, preset)) + ". "
                           + spread_line(report, unit) + ".")
    body = [" & ".join(latex_escape(c) for c in row) + r" \\" for row in cells[:-1]]
    lines = [r"\begin{table}[t]", r"\centering", rf"\caption{{{caption}}}",
             r"\begin{tabular}{lll" + "r" * (len(heads) - 3) + "}", r"\toprule",
             " & ".join(h if "$" in h else latex_escape(h) for h in heads) + r" \\", r"\midrule", *body, r"\midrule",
             " & ".join(latex_escape(c) for c in cells[-1]) + r" \\", r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines)


def csv_frame(report, preset: dict[str, Any]) -> pd.DataFrame:
    """One row per layer and a total row (kind `total`): the run's totals, the per-sample
    values, and the convention in every row (so a row read alone still says how it was costed)."""
    layers = report.layers.copy()
    total = {"scope": "Total", "index": None, "kind": "total", "dense_mac": report.totals["dense_mac"],
             "sop": report.totals["sop"], "mac": report.totals["mac"], "energy_pj": report.totals["energy_pj"]}
    frame = pd.concat([layers, pd.DataFrame([total])], ignore_index=True)
    frame = frame.astype({"index": "Int64", "calls": "Int64"})
    n = report.samples
    for column in ("dense_mac", "sop", "mac", "energy_pj"):
        frame[f"{column}_per_sample"] = frame[column] / n if n else None
    c = report.convention
    return frame.assign(samples=n, mode=c["mode"], first_layer=c["first_layer"], non_spike=c["non_spike"],
                        matmul_rate=c["matmul_rate"], preset=preset.get("name"), e_mac_pj=report.costs.e_mac_pj,
                        e_ac_pj=report.costs.e_ac_pj)


def json_document(report, preset: dict[str, Any], extra: dict[str, Any] | None = None) -> dict:
    """The document of docs/paper_energy_json.md."""
    return {"model": "paper", "preset": dict(preset), **report.to_json(), **(extra or {})}


__all__ = ["csv_frame", "json_document", "latex", "markdown", "per_sample_rows", "text_table"]
