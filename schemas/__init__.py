"""The versioned Arrow schemas of a spiketrace trace: the contract capture and analyze share."""

from spiketrace.schemas.layout import FORMAT_MARKER, MANIFEST_NAME
from spiketrace.schemas.statistics import OP_STATISTICS, STATISTICS, SYNAPTIC_INPUTS
from spiketrace.schemas.tables import TABLES, field_doc, table_doc
from spiketrace.schemas.version import SCHEMA_VERSION, SchemaVersionError, check_readable, parse_version

__all__ = [
    "FORMAT_MARKER",
    "MANIFEST_NAME",
    "OP_STATISTICS",
    "SCHEMA_VERSION",
    "STATISTICS",
    "SYNAPTIC_INPUTS",
    "SchemaVersionError",
    "TABLES",
    "check_readable",
    "field_doc",
    "parse_version",
    "table_doc",
]
