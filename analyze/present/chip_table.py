"""The chip model's report (analyze/energy/chip.py) as text, CSV rows and the JSON document of
docs/chip_energy_json.md. Every output names the preset with its source, grade, basis,
node, voltage and scope, each term costed or why not, whether static energy is included,
and the work a chip cannot do as events (host MACs, normalisation and softmax elements).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from spiketrace.analyze.present.safe_text import safe_line
from spiketrace.analyze.present.units import energy_scale
from spiketrace.analyze.presets.provenance import provenance_line

_NOT_COSTED = {"not in preset": "not a figure of this preset", "needs step time": "time-based: give --step-time",
               "uncosted": "no host preset: give --host NAME (e.g. paper-fp32-45nm)"}


def preset_lines(preset: dict[str, Any]) -> list[str]:
    """The preset's name, provenance and source: one line each."""
    provenance = preset.get("provenance") or {}
    lines = [f"preset: {preset.get('name', '?')} ({provenance_line(provenance) or 'provenance not given'})",
             f"source: {preset.get('source', '?')}"]
    if preset.get("overrides"):
        lines.append("overrides (not the source's figures): "
                     + ", ".join(f"{key}={value}" for key, value in preset["overrides"].items()))
    if provenance.get("scope") == "all-in":
        lines.append("scope all-in: the synaptic figure holds leakage, routing and neuron updates; no other term "
                     "is added")
    elif provenance.get("scope") == "minimum":
        lines.append("scope minimum: the figure is a lower bound, at the chip's best operating point")
    return lines


def _status(row, scope: str | None) -> str:
    if row["status"] == "costed":
        return "costed"
    if row["status"] == "not in preset" and scope == "all-in" and row["term"] not in ("host",):
        return "inside the all-in synaptic figure"
    return _NOT_COSTED.get(row["status"], row["status"])


def term_rows(report, preset: dict[str, Any]) -> pd.DataFrame:
    """One row per term: what, count, pJ per unit, energy pJ, status in words."""
    scope = (preset.get("provenance") or {}).get("scope")
    terms = report.terms.copy()
    terms["status"] = [_status(row, scope) for _, row in terms.iterrows()]
    return terms


def _number(value, digits: str = ",.1f") -> str:
    return "" if value is None or pd.isna(value) else format(float(value), digits)


def host_lines(report) -> list[str]:
    """The work a chip cannot do as events, listed with its size."""
    host = report.host
    lines = []
    layers = report.synaptic[report.synaptic["mac"] > 0]
    for label, (_, row) in zip([n for n, m in zip(report.labels(), report.synaptic["mac"]) if m > 0], layers.iterrows()):
        cost = (f"costed under {host['name']} (E_MAC {host['e_mac_pj']:g} pJ): {row['mac'] * host['e_mac_pj']:,.1f} pJ"
                if host else "uncosted")
        lines.append(f"host work: {label} ({row['kind']}, {row['input']} input): {row['mac']:,.0f} MACs, {cost}")
    for _, row in report.host_ops.iterrows():
        lines.append(f"host work: {row['op']}: {int(row['calls'])} calls, {row['elements']:,.0f} output elements, "
                     "uncosted")
    return lines or ["host work: none (every synaptic layer's input is spikes)"]


def text_table(report, preset: dict[str, Any], scope: str | None = None) -> str:
    per = "per sample" if report.samples else "over the run (samples unknown)"
    total = report.per_sample["energy_pj"] if report.samples else report.totals["energy_pj"]
    scale, unit = energy_scale([total])
    head = f"chip energy{f' ({scope})' if scope else ''} under {preset.get('name', '?')}: {total / scale:.6g} {unit} {per}"
    terms = term_rows(report, preset)
    n = report.samples or 1
    cells = [[row["term"], row["what"], _number(row["count"] / n if row["count"] is not None else None, ",.3f"),
              _number(row["pj_per_unit"], ".6g"),
              _number(row["energy_pj"] / n if row["energy_pj"] is not None else None, ",.1f"), row["status"]]
             for _, row in terms.iterrows()]
    heads = ["Term", "What", "Count" + (" per sample" if report.samples else ""), "pJ each",
             "Energy (pJ" + (" per sample)" if report.samples else ")"), "Status"]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(heads)]

    def line(values) -> str:
        return "  ".join(v.rjust(w) if i in (2, 3, 4) else v.ljust(w)
                         for i, (v, w) in enumerate(zip(values, widths))).rstrip()

    time = report.time
    static = next((note for note in report.warnings if note.startswith("static energy not included")),
                  f"static energy included: {time['chip_time_basis']}")
    if (preset.get("provenance") or {}).get("scope") == "all-in" and not report.totals["static_included"]:
        static = "static energy: inside the all-in synaptic figure (leakage included), not added apart"
    facts = [f"samples: {report.samples if report.samples is not None else 'unknown'}; time steps: "
             f"{time['time_steps']} ({time['time_steps_source']}); step time: "
             + (f"{time['step_time_s']:g} s" if time["step_time_s"] is not None else "not given"),
             static,
             "neuron updates: active = input nonzero or spiked (max of the input's nnz and the spikes per call), "
             "inactive = the rest"]
    body = [line(heads), line(["-" * w for w in widths]), *(line(r) for r in cells)]
    return "\n".join(safe_line(x) for x in [head, *body, "", *preset_lines(preset), *facts, *host_lines(report)])


def csv_frame(report, preset: dict[str, Any]) -> pd.DataFrame:
    """One row per term (what, count, pj_per_unit, energy_pj, status) and per sample, the
    preset's provenance in every row."""
    terms = term_rows(report, preset)
    n = report.samples
    terms["count_per_sample"] = [c / n if n and c is not None else None for c in terms["count"]]
    terms["energy_pj_per_sample"] = [e / n if n and e is not None and not pd.isna(e) else None
                                     for e in terms["energy_pj"]]
    provenance = preset.get("provenance") or {}
    return terms.assign(samples=n, preset=preset.get("name"), source=preset.get("source"),
                        **{key: provenance.get(key) for key in ("grade", "basis", "node", "voltage", "scope")},
                        step_time_s=report.time["step_time_s"], static_included=report.totals["static_included"],
                        host=report.host["name"] if report.host else None)


def json_document(report, preset: dict[str, Any], extra: dict[str, Any] | None = None) -> dict:
    """The document of docs/chip_energy_json.md."""
    document = report.to_json()
    scope = (preset.get("provenance") or {}).get("scope")
    document["terms"] = [{**t, "status_text": _status(t, scope)} for t in document["terms"]]
    return {"model": "chip", "preset": dict(preset), **document, **(extra or {})}


__all__ = ["csv_frame", "host_lines", "json_document", "preset_lines", "term_rows", "text_table"]
