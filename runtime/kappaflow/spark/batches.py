"""Repartitioned records between two reprocessing stages: how a task's batches are encoded for Spark's
shuffle, and how the reading task orders them into its input (executor.py).

A task sends each repartitioned record to its target slot's batch. With the native core the batches are
byte buffers filled by the sink stage itself (`kappaflow_native.ShuffleSend`, runtime/native/src/
shuffle.rs) and read back straight into record tuples (`kappaflow_native.ShuffledCursor`); without it
they are lists of `Emitted` tuples, marshalled. Either travels as `encode_batch(base, span, batch)`.
`encode_records` / `decode_records` are the Python reference of the byte format, which the tests compare
with the core's; a reading task without the core decodes payloads with them.
"""

from __future__ import annotations

import heapq
import itertools
import marshal
import operator
from collections.abc import Generator, Iterable
from typing import cast

from kappaflow.api.record import Headers
from kappaflow.tasks.drain import RawTuple
from kappaflow.tasks.native import NativeCore

Emitted = tuple[
    int, bytes | None, bytes | None, list[tuple[str, bytes | None]] | None
]  # ts, key, value, headers
Batch = list[Emitted] | bytes  # a batch's records: a list (Python collector) or a payload (native core)
Decoded = tuple[int, int, Batch]  # (base, span, records) of an encoded batch

_TIMESTAMP = operator.itemgetter(0)  # of an Emitted
_BASE = operator.itemgetter(0)  # of a Decoded


def encode_batch(base: int, span: int, batch: Batch) -> bytes:
    """A repartitioned batch as bytes for Spark's shuffle: marshal, which writes a payload as it is and
    a list of plain tuples of ints, bytes, strings and None about four times faster than pickle.

    `base` orders the batches of one upstream partition's chunks (offset order), `span` is how many
    records the emitting task sent to all targets: batches whose [base, base + span) do not overlap are
    concatenated in base order, which is the emit order of one unsplit task. That is per batch, not per
    record: a sequence number on every record cost a large int in each record's tuple, in marshal's bytes
    through every crossing of Spark, and a sort of every batch on the reading side.

    marshal's format may change between Python versions; PySpark already requires the driver's Python
    version on every worker, and batches only travel between workers of one job."""
    return marshal.dumps((base, span, batch))


def decode_batch(data: bytes) -> Decoded:
    """(base, span, records or payload) of an encoded batch (encode_batch)."""
    decoded: Decoded = marshal.loads(data)
    return decoded


def batch_records(data: bytes) -> list[Emitted]:
    """The records of an encoded batch, in emit order, whichever collector made it."""
    batch = decode_batch(data)[2]
    return decode_records(batch) if isinstance(batch, bytes) else batch


def _varint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _put(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out.append(0)
    else:
        _varint(out, len(data) + 1)
        out += data


def encode_records(records: Iterable[Emitted]) -> bytes:
    """The native payload of `records` (shuffle.rs's format), every integer a LEB128 varint: the
    timestamp's difference from the previous record's (the first's from 0), zigzag-encoded; the key and
    value each as length + 1 (0 for None) and the bytes; the header count and per header the UTF-8 name's
    length and the name, and the value as the key's."""
    out = bytearray()
    previous = 0
    for timestamp, key, value, headers in records:
        delta = timestamp - previous
        previous = timestamp
        _varint(out, (delta << 1) ^ (delta >> 63) if delta < 0 else delta << 1)
        _put(out, key)
        _put(out, value)
        _varint(out, len(headers or ()))
        for name, header in headers or ():
            encoded = name.encode()
            _varint(out, len(encoded))
            out += encoded
            _put(out, header)
    return bytes(out)


class _Cursor:
    """Reading a payload front to back (decode_records)."""

    def __init__(self, payload: bytes) -> None:
        self.payload, self.at = payload, 0

    def truncated(self) -> ValueError:
        return ValueError(f"a shuffled batch ends inside a record (byte {self.at} of {len(self.payload)})")

    def varint(self) -> int:
        value = shift = 0
        while True:
            if self.at >= len(self.payload):
                raise self.truncated()
            byte = self.payload[self.at]
            self.at += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.payload):
            raise self.truncated()
        self.at += n
        return self.payload[self.at - n : self.at]

    def bytes_or_none(self) -> bytes | None:
        length = self.varint()
        return None if length == 0 else self.take(length - 1)


def decode_records(payload: bytes) -> list[Emitted]:
    """The records of a native payload (encode_records' format), in order."""
    records: list[Emitted] = []
    cursor = _Cursor(payload)
    timestamp = 0
    while cursor.at < len(payload):
        zigzag = cursor.varint()
        timestamp += (zigzag >> 1) ^ -(zigzag & 1)
        key = cursor.bytes_or_none()
        value = cursor.bytes_or_none()
        headers: list[tuple[str, bytes | None]] | None = None
        count = cursor.varint()
        if count:
            headers = []
            for _ in range(count):
                name = cursor.take(cursor.varint()).decode()
                headers.append((name, cursor.bytes_or_none()))
        records.append((timestamp, key, value, headers))
    return records


def upstream_runs(batches: list[Decoded]) -> list[list[Batch]]:
    """One upstream partition's batches as runs in emit order: chunks, ordered by base, one after another.

    Batches whose ranges overlap did not come from chunks of one partition (two sub-topologies writing
    one repartition topic, each numbering from its own start): each starts a run of its own, which the
    timestamp merge then interleaves as it does different upstream partitions.
    """
    runs: list[list[Batch]] = []
    end = -1
    for base, span, batch in sorted(batches, key=_BASE):
        if runs and base >= end:
            runs[-1].append(batch)
        else:
            runs.append([batch])
        end = max(end, base + span)
    return runs


def merge_by_timestamp(runs: list[list[Emitted]]) -> Iterable[Emitted]:
    """The runs merged by timestamp, stably: on a tie the earlier run first, and a run never reordered.

    That is `heapq.merge`, a Python generator (about a microsecond per record). When every run is already
    in timestamp order - the usual case: a producer's timestamps rise within a partition - a stable sort
    of the runs one after another yields the same sequence, and timsort merges such runs in C.
    """
    if all(_ascending(run) for run in runs):
        return sorted(itertools.chain.from_iterable(runs), key=_TIMESTAMP)
    return heapq.merge(*runs, key=_TIMESTAMP)


def _ascending(run: list[Emitted]) -> bool:
    stamps = list(map(_TIMESTAMP, run))
    return all(map(operator.le, stamps, itertools.islice(stamps, 1, None)))


def shuffled_batches(
    runs: list[list[Batch]], core: NativeCore | None, size: int
) -> Generator[list[RawTuple], None, None]:
    """`shuffled_input`'s records in batches of `size` (the last one shorter, none empty), each built
    only when the one before it was taken: a task processes one before the next exists (executor.py).

    The native core merges the payloads' run heads itself (`ShuffledCursor`), so the record tuples of
    one batch at a time are alive; the reference decodes every payload first, as shuffled_input does."""
    if core is not None and all(isinstance(batch, bytes) for run in runs for batch in run):
        cursor = core.ShuffledCursor(cast(list[list[bytes]], runs), Headers)
        while batch := cursor.take(size):
            yield batch
        return
    records = iter(shuffled_input(runs, None))
    while batch := list(itertools.islice(records, size)):
        yield batch


def shuffled_input(runs: list[list[Batch]], core: NativeCore | None) -> list[RawTuple]:
    """A repartition partition's records as the reading task queues them: the upstream runs merged by
    timestamp (merge_by_timestamp) and numbered 0.. as in a fresh repartition topic.

    Payloads are read by the native core when every batch is one (the usual case: every task of a job
    has the same core); otherwise by the reference decoder, merged and numbered here."""
    if core is not None and all(isinstance(batch, bytes) for run in runs for batch in run):
        return core.shuffled_records(runs, Headers)
    emitted = [
        [record for batch in run for record in (decode_records(batch) if isinstance(batch, bytes) else batch)]
        for run in runs
    ]
    merged = emitted[0] if len(emitted) == 1 else merge_by_timestamp(emitted)
    return [(i, e[0], e[1], e[2], Headers(e[3] or ())) for i, e in enumerate(merged)]
