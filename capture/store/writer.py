"""Buffered, columnar writing of a trace: column buffers (TableBuffer) flushed to
Parquet parts and committed in the manifest.

Buffered rows cost Python memory (benchmarks/capture_overhead.py, part 5, shows how much an
event), so `buffered_bytes_estimate` adds up what the buffers really hold, and `flush_bytes`
bounds that.
A flush turns the lists into Arrow arrays and writes one part per table, each created
exclusively (O_EXCL, through directory descriptors opened with O_NOFOLLOW, so never through
a link someone left in the trace); then it commits them in one atomic manifest rewrite that
lists each part with its rows, bytes and BLAKE2b checksum. Readers read
committed parts only, so a process killed at any moment leaves a consistent snapshot: the
committed flushes, a manifest that says `running`, and at most one flush's uncommitted files.

A write that fails (disk full, read-only or vanished directory, a file-size limit) never
raises into the training script: the flush is undone (parts it already renamed are removed,
so every part the manifest lists belongs to a whole flush), the error naming the file goes
into the manifest (`status: failed`, `error`, a `writer` entry in `degraded`) if the manifest
can still be written, and the writer drops what it buffers from then on (`failed`). A value
a column's type cannot hold does not fail it: it is null (TableBuffer._array), and a `writer`
entry in `degraded` names the column.

Several ranks start in one directory at once, so start-up tolerates the other ranks' files
appearing at any moment and touches only this rank's own files: it removes only regular files
named as this rank's parts and manifest, and refuses a directory where it finds a link, a
special file or a file it did not write.

A process forked from the one that created the writer (os.fork, fork-started workers) holds a
copy of it, buffers and part numbering included, and must never write under the parent's
names: the writer checks the pid it was created in (`inherited`), so in such a child a flush,
the manifest, close and compaction write, rename and remove nothing (capture/session/forks.py).

This module needs pyarrow only (no torch), so tests and tools can write traces without torch.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from spiketrace.capture.store.compaction import compact_rank
from spiketrace.capture.store.failures import FailureLog, describe_error, logger
from spiketrace.capture.store.run_id import agree_run_id
from spiketrace.capture.store.table_buffer import TableBuffer
from spiketrace.capture.store.trace_root import TracePathError, prepare_root  # noqa: F401 - TracePathError re-exported
from spiketrace.schemas import layout
from spiketrace.schemas.safe_files import checksum_of_bytes, create_new
from spiketrace.schemas.tables import TABLES
from spiketrace.schemas.version import SCHEMA_VERSION

ZSTD_LEVEL = 9  # clearly smaller parts than the default level, at a small cost per flush


def _encodings(schema: pa.Schema) -> tuple[list[str], list[str]]:
    """Integer columns get delta encoding (ids and seq numbers grow steadily, so their
    deltas pack into a few bits, far smaller than a dictionary), the rest dictionary."""
    delta = [f.name for f in schema if pa.types.is_integer(f.type)]
    return delta, [f.name for f in schema if f.name not in delta]


_unique = itertools.count()
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)


def _unique_suffix() -> str:
    return f"{os.getpid()}-{next(_unique)}"


def _write_all(fd: int, data) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def atomic_write_text(path: Path, text: str) -> None:
    """Replace `path` with `text` atomically, via a temporary file created afresh (O_EXCL)."""
    tmp = path.with_name(layout.temporary_name(path.name, _unique_suffix()))
    fd = create_new(tmp)
    try:
        try:
            _write_all(fd, text.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # ours: created exclusively above
        raise


def _open_directory(name: str, dir_fd: int | None) -> int:
    """Descriptor of directory `name` (under `dir_fd`), created if absent, never a link."""
    try:
        os.mkdir(name, dir_fd=dir_fd)
    except FileExistsError:
        pass
    return os.open(name, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_NOFOLLOW", 0), dir_fd=dir_fd)


def _naming_file(exc: Exception, path: Path) -> Exception:
    """The same OS error, its message naming the file (pyarrow's I/O errors do not)."""
    if not isinstance(exc, OSError) or exc.filename is not None:
        return exc
    if exc.errno is not None:
        return OSError(exc.errno, exc.strerror or str(exc), str(path))
    return OSError(f"{path}: {exc}")


def write_part(root: Path, name: str, rank: int, index: int, table: pa.Table, run_id: str) -> tuple[Path, dict]:
    """Write `table` as part `index` of table `name`, rank `rank`, created exclusively under its
    final name; return its path and its manifest entry. The bytes are checksummed as written,
    so a part is read once."""
    relative = Path(name) / f"rank={rank}" / layout.part_name(index)
    final = root / relative
    metadata = dict(table.schema.metadata or {})
    metadata[layout.METADATA_VERSION_KEY] = SCHEMA_VERSION.encode()
    metadata[layout.METADATA_TABLE_KEY] = name.encode()
    metadata[layout.METADATA_RUN_KEY] = run_id.encode()
    delta, dictionary = _encodings(table.schema)
    sink = pa.BufferOutputStream()
    pq.write_table(
        table.replace_schema_metadata(metadata),
        sink,
        compression="zstd",
        compression_level=ZSTD_LEVEL,
        use_dictionary=dictionary,
        column_encoding={column: "DELTA_BINARY_PACKED" for column in delta},
        write_page_checksum=True,  # validate names the damaged column of a damaged part
    )
    data = sink.getvalue()
    directories: list[int] = []
    created = False
    try:
        directories.append(os.open(root, os.O_RDONLY | os.O_DIRECTORY))
        directories.append(_open_directory(name, directories[-1]))
        directories.append(_open_directory(f"rank={rank}", directories[-1]))
        fd = os.open(final.name, _CREATE_FLAGS, 0o644, dir_fd=directories[-1])
        created = True
        try:
            _write_all(fd, data)
            os.fsync(fd)  # on disk before the manifest commits it
        finally:
            os.close(fd)
    except Exception as exc:
        if created:  # ours, half written: frees the space a full disk needs for the manifest
            final.unlink(missing_ok=True)
        raise _naming_file(exc, final) from exc
    finally:
        for fd in directories:
            os.close(fd)
    entry = {"path": relative.as_posix(), "rows": table.num_rows, "bytes": data.size,
             layout.CHECKSUM_NAME: checksum_of_bytes(data)}
    return final, entry


class TraceWriter:
    """Owns the buffers and files of one rank of one trace."""

    def __init__(
        self,
        root: str | os.PathLike,
        *,
        rank: int = 0,
        world_size: int = 1,
        settings: dict | None = None,
        metadata: dict | None = None,
        versions: dict | None = None,
        device: str = "cpu",
        flush_rows: int = 200_000,  # events per part
        flush_bytes: int = 256 << 20,
        run_id: str | None = None,
        compact: bool = True,
    ) -> None:
        self.root = Path(root)
        self._pid = os.getpid()  # the process that owns the files (see `inherited`)
        self.rank = rank
        self.run_id, run_id_source = agree_run_id(self.root, rank, run_id)
        prepare_root(self.root, rank)
        self.tables = {name: TableBuffer(name, schema) for name, schema in TABLES.items()}
        self.flush_rows = flush_rows
        self.flush_bytes = flush_bytes
        self.compact = compact
        # Called with the writer before buffers become Arrow: fills deferred values in place.
        self.before_flush: list[Callable[[TraceWriter], None]] = []
        # Called once when a write fails: the recorder stops recording (nothing can be kept).
        self.on_failure: list[Callable[[], None]] = []
        self.failures = FailureLog(str(self.root), on_new_kind=self._save_manifest)
        self.failed = False
        self._saving = False
        self.part_index = 0
        self.counts = {name: 0 for name in TABLES}
        # table -> committed parts: {"path", "rows", "bytes", "blake2b"}
        self.parts: dict[str, list[dict]] = {name: [] for name in TABLES}
        self.manifest: dict[str, Any] = {
            "format": layout.FORMAT_MARKER,
            "schema_version": SCHEMA_VERSION,
            "run_id": self.run_id,
            "run_id_source": run_id_source,
            "status": "running",
            "rank": rank,
            "world_size": world_size,
            "started_at": time.time(),
            "ended_at": None,
            "versions": versions or {},
            "device": device,
            "settings": settings or {},
            "metadata": metadata or {},
            "counts": self.counts,
            "parts": self.parts,
            "steps_recorded": 0,
            "degraded": self.failures.entries,
        }
        self.closed = False
        self.write_manifest()

    @property
    def inherited(self) -> bool:
        """This is a forked process's copy of the writer (module docstring): it writes nothing."""
        return os.getpid() != self._pid

    def buffered_bytes_estimate(self) -> int:
        """The Python memory the buffered rows hold (TableBuffer.buffered_bytes)."""
        return sum(buffer.buffered_bytes() for buffer in self.tables.values())

    def maybe_flush(self) -> None:
        events = len(self.tables["events"])
        if events >= self.flush_rows or (events and events % 4096 == 0 and self.buffered_bytes_estimate() >= self.flush_bytes):
            self.flush()

    def drop_partial_rows(self) -> None:
        """Make every buffer whole again after a record was cut short by a failure."""
        for buffer in self.tables.values():
            buffer.drop_partial_row()

    def write_manifest(self) -> None:
        if self.inherited:  # raised, not skipped: a caller (compaction) must not take it as committed
            raise RuntimeError(f"{self.root}: this process is a fork of the one writing the trace; it writes nothing there")
        atomic_write_text(
            layout.manifest_path(self.root, self.rank), json.dumps(self.manifest, indent=1, default=str)
        )

    def _save_manifest(self) -> Exception | None:
        """write_manifest, reporting instead of raising (the manifest of a failing disk)."""
        if self._saving or self.inherited:  # (reporting a failed save asks for a save: one attempt is enough)
            return None
        path = layout.manifest_path(self.root, self.rank)
        self._saving = True
        try:
            self.write_manifest()
            return None
        except Exception as exc:  # noqa: BLE001 - see module docstring
            path.with_name(path.name + layout.TMP_SUFFIX).unlink(missing_ok=True)
            error = _naming_file(exc, path)
            self.failures.report("writer", str(path), error)
            return error
        finally:
            self._saving = False

    def _write_part(self, name: str, table: pa.Table) -> tuple[Path, dict]:
        return write_part(self.root, name, self.rank, self.part_index, table, self.run_id)

    def flush(self, *, empty_parts: bool = False) -> bool:
        """Write every non-empty buffer as a part (every buffer when `empty_parts`).

        All tables of one flush share a part index and are committed together: the manifest
        lists them only once all were written. Returns False when nothing could be written
        (this flush failed, or an earlier one did, or this is a fork's copy); it never raises.
        """
        if self.inherited:
            return False
        try:
            for hook in self.before_flush:
                hook(self)
        except Exception as exc:  # noqa: BLE001 - deferred values unresolved: the rows cannot be written
            self._fail(exc, f"{getattr(hook, '__qualname__', hook)} before a flush of {self.root}")
        if self.failed:
            self._drop_buffers()
            return False
        # Each table's rows as this flush finds them: rows appended meanwhile (a tensor freed
        # during the flush, another thread's op) stay buffered for the next one.
        taken = {name: buffer.complete_rows() for name, buffer in self.tables.items()}
        pending = [name for name in self.tables if taken[name] or (empty_parts and not self.parts[name])]
        if not pending:
            return True
        written: list[Path] = []
        entries: list[dict] = []
        part = self.root
        try:
            for name in pending:
                part = layout.part_dir(self.root, name, self.rank) / layout.part_name(self.part_index)
                buffer = self.tables[name]
                table = buffer.to_arrow(taken[name])
                for column, unconverted in buffer.unconvertible:  # nulled, the rest written (TableBuffer._array)
                    self.failures.report("writer", f"{name}.{column}", unconverted)
                buffer.unconvertible.clear()
                path, entry = self._write_part(name, table)
                written.append(path)
                entries.append(entry)
        except Exception as exc:  # noqa: BLE001 - see module docstring
            for path in written:  # an incomplete flush is undone: its parts would refer to missing rows
                path.unlink(missing_ok=True)
            self._fail(exc, str(part))
            self._drop_buffers()
            return False
        for name, entry in zip(pending, entries):
            self.parts[name].append(entry)
            self.counts[name] += taken[name]
        error = self._save_manifest()
        if error is not None:
            # No manifest lists these parts: undo the flush, which also frees the space a
            # full disk needs for the manifest that says `failed` (reported already).
            for name, path in zip(pending, written):
                path.unlink(missing_ok=True)
                self.parts[name].pop()
                self.counts[name] -= taken[name]
            self._fail(error, str(layout.manifest_path(self.root, self.rank)), report=False)
            self._drop_buffers()
            return False
        for name in pending:
            self.tables[name].drop_first(taken[name])
        self.part_index += 1
        return True

    def _fail(self, exc: Exception, what: str, report: bool = True) -> None:
        """From now on nothing is written: record why, stop the recorder."""
        if self.failed:
            return
        self.failed = True
        self.manifest["status"] = "failed"
        self.manifest.setdefault("error", f"capture failed: {describe_error(exc)}")
        if report:
            self.failures.report("writer", what, exc)  # a new kind: rewrites the manifest, if it can
        else:
            self._save_manifest()
        for callback in self.on_failure:
            try:
                callback()
            except Exception:  # noqa: BLE001 - the failure is recorded; one callback must not stop the rest
                pass

    def _drop_buffers(self) -> None:
        for buffer in self.tables.values():
            buffer.clear()

    def close(self, status: str = "complete") -> None:
        """Write what is buffered and the final manifest. Never raises: a failure is recorded
        as status `failed` where the manifest can still be written."""
        if self.closed:
            return
        self.closed = True
        if self.inherited:  # the parent closes its trace
            return
        # A clean close leaves at least one part per table, so a missing table means damage.
        self.flush(empty_parts=True)
        if self.compact and not self.failed:
            self._compact()
        self.manifest["status"] = "failed" if self.failed else status
        self.manifest["ended_at"] = time.time()
        self._save_manifest()

    def _compact(self) -> None:
        """Merge the small parts of small flushes (compact_rank). Optional work: a
        failure is logged and the committed parts stay as they are."""
        def commit(manifest: dict) -> None:
            self.write_manifest()

        try:
            compact_rank(self.root, self.rank, self.manifest, commit, write_part)
        except Exception as exc:  # noqa: BLE001 - the trace is whole without it
            logger.warning("spiketrace: %s: small parts left as they are; compacting them failed (%s)",
                           self.root, describe_error(exc))
