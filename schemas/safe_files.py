"""Opening a trace's files without following links or blocking on special files.

A trace directory may have been prepared by someone else: a part or manifest that is a
symlink would make a reader read another trace's data, or a writer overwrite a file outside
the trace; a FIFO would block every open forever. Both phases therefore open trace files
with O_NOFOLLOW (a symlink fails with ELOOP) and O_NONBLOCK (a FIFO opens at once), then
check with fstat, on the descriptor actually opened, that it is a regular file. Directories
inside a trace are checked with lstat the same way.

Stdlib only: capture (torch + pyarrow) and analyze both import it.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from spiketrace.schemas.layout import CHECKSUM_DIGEST_SIZE

# O_NONBLOCK and O_NOFOLLOW are POSIX's: on Windows neither exists (nor do FIFOs or, for a
# plain user, symlinks to open), and a file opens as O_BINARY.
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | _NONBLOCK | getattr(os, "O_BINARY", 0)
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
_KINDS = [
    (stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a directory"),
]


class UnsafeFileError(OSError):
    """A path inside a trace is a link or a special file; the message is one line naming it."""


def kind_of(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def open_regular(path: Path) -> int:
    """A read-only descriptor on `path`, which must be a regular file (not a link, FIFO...)."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as exc:
        if os.path.islink(path):
            raise UnsafeFileError(f"{path}: is a symbolic link; trace files must be regular files") from exc
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise UnsafeFileError(f"{path}: is {kind_of(mode)}; trace files must be regular files")
    if _NONBLOCK:  # reads block again (opened non-blocking only so a FIFO could not hang the open)
        os.set_blocking(fd, True)
    return fd


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of regular file `path`, refusing one larger than `limit` bytes."""
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > limit:
            raise UnsafeFileError(f"{path}: {size} bytes, more than the {limit} a manifest may have")
        return handle.read(limit + 1)


def create_new(path: Path) -> int:
    """A write descriptor on `path`, created now: fails if anything (a link too) is there."""
    return os.open(path, _CREATE_FLAGS, 0o644)


def check_plain_directory(path: Path) -> bool:
    """True if `path` is a real directory, False if absent; raises on a link or other file."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(mode):
        raise UnsafeFileError(f"{path}: is {kind_of(mode)}; trace directories must be real directories")
    return True


def checksum_of_bytes(data) -> str:
    return hashlib.blake2b(data, digest_size=CHECKSUM_DIGEST_SIZE).hexdigest()


def checksum_of_handle(handle) -> str:
    """BLAKE2b of everything a binary file object holds, read from its start."""
    handle.seek(0)
    return hashlib.file_digest(handle, lambda: hashlib.blake2b(digest_size=CHECKSUM_DIGEST_SIZE)).hexdigest()


def checksum_of_file(path: Path) -> str:
    """BLAKE2b of the whole regular file at `path`."""
    with os.fdopen(open_regular(path), "rb") as handle:
        return checksum_of_handle(handle)
