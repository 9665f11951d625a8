"""Where a preset's numbers come from, said in its [preset] table beside `source`:

    grade     how directly the number was checked against the primary text, the grades of
              ../shared/reference/hardware_catalogue.md: A (read in the primary text) or B (an
              independent careful source quotes it verbatim). C (a secondary table or tool code)
              and D (recollection) are refused: a preset ships only numbers someone checked.
    basis     measured (on silicon), simulated (pre-silicon), simulated/synthesized (a
              synthesized core's figures), or derived (arithmetic on published numbers)
    node      the process node, as the source names it ("Intel 14 nm FinFET")
    voltage   the supply the figures hold at ("0.75 V"; "not stated" where the source gives none)
    scope     what one charged figure holds: all-in (every other cost is inside it: add no other
              term), per-term (each figure one term; a term not given is not costed), minimum
              (a lower bound: the figure at the best operating point)
    rows      the catalogue rows the numbers are transcribed from ("L1, L3, L4")

Every key is optional for a preset of any model and checked when given; the models in
REQUIRED_FOR need grade, basis, node, voltage and scope (a chip preset without them could not
say how far to trust it).
"""

from __future__ import annotations

from collections.abc import Mapping

from spiketrace.analyze.presets.checks import brief

KEYS = ("grade", "basis", "node", "voltage", "scope", "rows")
CHOICES = {
    "grade": ("A", "B"),
    "basis": ("measured", "simulated", "simulated/synthesized", "derived"),
    "scope": ("all-in", "per-term", "minimum"),
}
REFUSED_GRADES = {"C": "a secondary table or tool code; the primary text was not seen",
                  "D": "recollection, or a number that could not be traced"}
REQUIRED_FOR = {"chip": ("grade", "basis", "node", "voltage", "scope")}


def provenance_problems(head: Mapping, model: str | None, where: str) -> list[str]:
    """One line per problem of the provenance keys in `head` (the [preset] table), each naming
    `where` (the file) and the key."""
    problems = []
    for key in KEYS:
        if key not in head:
            continue
        value = head[key]
        if not isinstance(value, str) or not value:
            problems.append(f"{where}: [preset] {key} = {brief(value)}: must be a nonempty string")
        elif key == "grade" and value in REFUSED_GRADES:
            problems.append(f"{where}: [preset] grade = {value!r}: grade {value} ({REFUSED_GRADES[value]}) is refused; "
                            "only grades A and B ship")
        elif key in CHOICES and value not in CHOICES[key]:
            problems.append(f"{where}: [preset] {key} = {brief(value)}: must be one of {', '.join(CHOICES[key])}")
    missing = [key for key in REQUIRED_FOR.get(model or "", ()) if key not in head]
    if missing:
        problems.append(f"{where}: [preset] lacks {', '.join(missing)} (a {model} preset says how far to trust it)")
    return problems


def provenance(head: Mapping) -> dict[str, str]:
    """The provenance keys `head` gives, in KEYS order."""
    return {key: head[key] for key in KEYS if key in head}


def provenance_line(values: Mapping[str, str]) -> str:
    """'grade B, simulated, Intel 14 nm FinFET, 0.75 V, scope per-term (rows L1, L3)', or ''."""
    if not values:
        return ""
    parts = [f"grade {values['grade']}" if "grade" in values else "",
             values.get("basis", ""), values.get("node", ""), _voltage(values.get("voltage", "")),
             f"scope {values['scope']}" if "scope" in values else ""]
    line = ", ".join(p for p in parts if p)
    return line + (f" (catalogue rows {values['rows']})" if "rows" in values else "")


def _voltage(text: str) -> str:
    return text if not text or text.rstrip().endswith("V") else f"voltage {text}"
