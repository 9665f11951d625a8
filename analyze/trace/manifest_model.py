"""The manifest's schema: every field a reader uses, its type and its plausible range.

A manifest is data someone may have edited or damaged, so it is parsed by this model (pydantic,
strict: a JSON string is not an int, a bool is not a number) before anything reads it, and a
problem is one line naming the field. Unknown keys are allowed: a newer minor version may add
fields, as it may add columns.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from spiketrace.schemas import layout

MAX_COUNT = 2**53  # rows, bytes and counts beyond this are no real trace's
MAX_PARTS = 100_000  # per table and rank: 20 billion events at the default flush size
MAX_RANKS = 1_000_000

PART_PATH = r"^[a-z_]+/rank=\d+/part-\d{5,}\.parquet$"


class PartEntry(BaseModel):
    """One committed part (schema 1.2): where it is, what it holds, its checksum."""

    model_config = ConfigDict(extra="forbid", strict=True)
    path: str = Field(pattern=PART_PATH, max_length=200)
    rows: int = Field(ge=0, le=MAX_COUNT)
    bytes: int = Field(ge=0, le=MAX_COUNT)
    blake2b: str = Field(pattern=rf"^[0-9a-f]{{{2 * layout.CHECKSUM_DIGEST_SIZE}}}$")


class FailureEntry(BaseModel):
    """One kind of the capture's own failure (capture/store/failures.py)."""

    model_config = ConfigDict(extra="allow", strict=True)
    site: str = Field(max_length=100)
    what: str = Field(max_length=10_000)
    error: str = Field(max_length=10_000)
    count: int = Field(ge=1, le=MAX_COUNT)
    first_seq: int | None = Field(default=None, ge=0, le=MAX_COUNT)


class Manifest(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    format: Literal["spiketrace-trace"]
    schema_version: str = Field(pattern=r"^\d{1,4}\.\d{1,4}$")
    status: Literal["running", "complete", "failed"]
    rank: int = Field(ge=0, lt=MAX_RANKS)
    world_size: int = Field(ge=1, le=MAX_RANKS)
    run_id: str | None = Field(default=None, max_length=200)
    run_id_source: str | None = Field(default=None, max_length=40)
    started_at: float | None = Field(default=None, ge=0, le=1e11, allow_inf_nan=False)
    ended_at: float | None = Field(default=None, ge=0, le=1e11, allow_inf_nan=False)
    error: str | None = None
    versions: dict[str, str] = {}
    device: str | None = None
    settings: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    counts: dict[str, Annotated[int, Field(ge=0, le=MAX_COUNT)]] = {}
    parts: dict[str, list[PartEntry | str]] = {}
    steps_recorded: int = Field(default=0, ge=0, le=MAX_COUNT)
    degraded: list[FailureEntry] = []
    compiled: bool = False
    compiled_seen: list[str] = []
    tracker_underflows: list[dict[str, Any]] = []
    unrecorded_threads: list[dict[str, Any]] = []  # threads the capture could not reach that ran
    torch_limitations: list[dict[str, Any]] = []  # what the capture's torch could not tell it
    forked_children: int = Field(default=0, ge=0, le=MAX_COUNT)  # processes forked while capturing


def _where(location: tuple) -> str:
    return ".".join(str(item) for item in location) or "(top level)"


def check_manifest(manifest: Any) -> str | None:
    """None if `manifest` (parsed JSON) fits the schema, else one line naming the field."""
    parts = manifest.get("parts") if isinstance(manifest, dict) else None
    for table, entries in (parts.items() if isinstance(parts, dict) else ()):
        if isinstance(entries, list) and len(entries) > MAX_PARTS:  # before parsing a million entries
            return f"manifest field parts.{table}: {len(entries)} parts, more than the {MAX_PARTS} a rank may have"
    try:
        Manifest.model_validate(manifest)
    except ValidationError as exc:
        error = exc.errors()[0]
        location = tuple(item for item in error["loc"] if not (isinstance(item, str) and item in ("PartEntry", "str")))
        shown = repr(error.get("input"))
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        return f"manifest field {_where(location)}: {error['msg']} (found {shown})"
    return None
