"""Moving a store snapshot (a RocksDB checkpoint directory) between instances as a tar stream.

The checkpoint is a flat directory of a few files (SST files, MANIFEST, CURRENT, OPTIONS, a log). It
travels as a plain ustar archive with an exact `Content-Length`, computed before the first byte is sent
(`tar_size`), because a tar stream cut at a member boundary reads as a complete, smaller archive: the
receiver counts what it read and refuses anything but exactly the announced length. It also refuses any
member that is not a regular file with a plain name (no paths, links or devices), so a peer cannot
write outside the staging directory. Nothing here knows about tasks or HTTP; runner/snapshots.py does.
"""

from __future__ import annotations

import logging
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Protocol

log = logging.getLogger(__name__)

BLOCK = tarfile.BLOCKSIZE  # 512
RECORD = tarfile.RECORDSIZE  # 20 blocks: a tar archive is padded to whole records
CHUNK = 1 << 20
PROGRESS_LOG_INTERVAL_S = 5.0


class Writable(Protocol):
    """Where an archive goes: a file, or an HTTP response's body (`BaseHTTPRequestHandler.wfile`)."""

    def write(self, data: bytes, /) -> object: ...

    def flush(self) -> object: ...


class SnapshotTransferError(Exception):
    """A snapshot that cannot be used: truncated, malformed, or holding something it must not."""


def snapshot_files(directory: Path) -> list[tuple[str, int]]:
    """(name, size) of the files of a checkpoint directory, sorted; anything but a plain file is an error."""
    files = []
    for entry in sorted(directory.iterdir()):
        if not entry.is_file() or entry.is_symlink():
            raise SnapshotTransferError(f"{entry}: a snapshot holds plain files only")
        files.append((entry.name, entry.stat().st_size))
    return files


def tar_size(files: list[tuple[str, int]]) -> int:
    """Pure: the exact length of the ustar archive `write_tar` produces for `files`: a header block per
    file, its data padded to whole blocks, two zero blocks, all padded to whole records."""
    total = 0
    for name, size in files:
        if len(name.encode()) >= 100:
            raise SnapshotTransferError(f"{name}: too long a name for a ustar header")
        total += BLOCK + -(-size // BLOCK) * BLOCK
    total += 2 * BLOCK
    return -(-total // RECORD) * RECORD


def write_tar(directory: Path, files: list[tuple[str, int]], out: Writable) -> int:
    """Stream `files` of `directory` to `out` as a ustar archive; return the bytes written (which is
    `tar_size(files)`, or the transfer is refused as inconsistent: a file changed size meanwhile)."""
    counting = _CountingWriter(out)
    with tarfile.open(fileobj=counting, mode="w|", format=tarfile.USTAR_FORMAT) as archive:  # type: ignore[call-overload]
        for name, size in files:
            info = tarfile.TarInfo(name)
            info.size = size
            info.mode = 0o644
            with (directory / name).open("rb") as data:
                archive.addfile(info, data)
    if counting.written != tar_size(files):
        raise SnapshotTransferError(f"wrote {counting.written} bytes, announced {tar_size(files)}")
    return counting.written


def read_tar(
    source: IO[bytes],
    length: int,
    staging: Path,
    deadline: float,
    progress: Callable[[int, int], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Extract a snapshot archive of exactly `length` bytes from `source` into `staging` (created here,
    must not exist); return the bytes read. Raises SnapshotTransferError on a short stream, a
    member that is not a plain file, or the `deadline` (a `clock` time) passing; the caller removes
    `staging` then. `progress(bytes read, length)` is called now and then for long transfers."""
    staging.mkdir(parents=True)
    counting = _CountingReader(source, length, deadline, progress, clock)
    try:
        with tarfile.open(fileobj=counting, mode="r|") as archive:  # type: ignore[call-overload]
            for member in archive:
                name = member.name
                if not member.isreg() or "/" in name or name in ("", ".", "..") or name.startswith("."):
                    raise SnapshotTransferError(f"unexpected archive member {name!r}")
                data = archive.extractfile(member)
                if data is None:
                    raise SnapshotTransferError(f"archive member {name!r} has no data")
                with (staging / name).open("wb") as out:
                    while chunk := data.read(CHUNK):
                        out.write(chunk)
        counting.drain()
    except (tarfile.TarError, EOFError) as exc:
        raise SnapshotTransferError(f"bad snapshot archive: {exc}") from exc
    if counting.read_bytes != length:
        raise SnapshotTransferError(f"snapshot archive truncated: {counting.read_bytes} of {length} bytes")
    return counting.read_bytes


class _CountingWriter:
    def __init__(self, out: Writable) -> None:
        self._out = out
        self.written = 0

    def write(self, data: bytes) -> int:
        self._out.write(data)
        self.written += len(data)
        return len(data)

    def flush(self) -> None:
        self._out.flush()


class _CountingReader:
    """Reads at most `length` bytes, counting them, checking the deadline and reporting progress."""

    def __init__(
        self,
        source: IO[bytes],
        length: int,
        deadline: float,
        progress: Callable[[int, int], None] | None,
        clock: Callable[[], float],
    ) -> None:
        self._source = source
        self._length = length
        self._deadline = deadline
        self._progress = progress
        self._clock = clock
        self._last_report = clock()
        self.read_bytes = 0

    def read(self, size: int = -1) -> bytes:
        now = self._clock()
        if now > self._deadline:
            raise SnapshotTransferError(f"snapshot transfer timed out after {self.read_bytes} bytes")
        left = self._length - self.read_bytes
        want = left if size is None or size < 0 else min(size, left)
        data = self._source.read(want) if want > 0 else b""
        self.read_bytes += len(data)
        if self._progress is not None and now - self._last_report >= PROGRESS_LOG_INTERVAL_S:
            self._last_report = now
            self._progress(self.read_bytes, self._length)
        return data

    def drain(self) -> None:
        """Read the archive's trailing padding (tarfile stops at the end-of-archive blocks)."""
        while self.read_bytes < self._length and self.read(CHUNK):
            pass
