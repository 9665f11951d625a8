"""Render the table reference of schemas/README.md from the schemas themselves.

`python -m spiketrace.schemas.docs` rewrites the generated part of the README; tests/test_schemas.py
fails when the README and the code disagree.
"""

from __future__ import annotations

from pathlib import Path

from spiketrace.schemas.statistics import STATISTICS
from spiketrace.schemas.tables import TABLES, field_doc, table_doc
from spiketrace.schemas.version import SCHEMA_VERSION

BEGIN = "<!-- BEGIN GENERATED: python -m spiketrace.schemas.docs -->"
END = "<!-- END GENERATED -->"
README = Path(__file__).with_name("README.md")


def _type_name(type_) -> str:
    text = str(type_)
    return "string (dictionary)" if text.startswith("dictionary<values=string") else text


def render() -> str:
    lines = [BEGIN, "", f"Schema version **{SCHEMA_VERSION}**.", ""]
    for name, schema in TABLES.items():
        lines += [f"### `{name}`", "", table_doc(schema), "", "| column | type | null | description |", "|---|---|---|---|"]
        for f in schema:
            lines.append(f"| `{f.name}` | {_type_name(f.type)} | {'yes' if f.nullable else 'no'} | {field_doc(f)} |")
        lines.append("")
    lines += ["### Op statistics (`op_stats.stat`)", "", "| stat | taken when | used by | meaning |", "|---|---|---|---|"]
    for name, stat in STATISTICS.items():
        lines.append(f"| `{name}` | {stat.condition} | {', '.join(stat.consumers)} | {stat.doc} |")
    lines += ["", END]
    return "\n".join(lines)


def generated_section(text: str) -> str:
    start, stop = text.index(BEGIN), text.index(END) + len(END)
    return text[start:stop]


def main() -> None:
    text = README.read_text()
    README.write_text(text.replace(generated_section(text), render()))


if __name__ == "__main__":
    main()
