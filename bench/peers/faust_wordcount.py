"""Word count on Faust-streaming, run by bench/python_peers.py inside Faust's own virtualenv.

The same data flow as kappaflow's and Java's word count: one agent splits lines and sends each word,
keyed by itself, to a words topic (the repartition step); a second agent counts them in a Faust Table
(changelogged to Kafka) and produces every count to the output topic. The table uses Faust's memory
store: its RocksDB store needs python-rocksdb, which does not build against current RocksDB releases;
the changelog is still written, as with kappaflow. Measured at at-least-once only. Timed from the first
line processed until the counting agent has seen every word; prints ``LINES_PER_SECOND <n>`` and
ends the process (the worker has no programmatic stop that returns to the caller).

    python faust_wordcount.py BOOTSTRAP SOURCE SINK LINES WORDS PARTITIONS WORDS_TOPIC

WORDS_TOPIC is created by the caller with the source's partition count, as Kafka Streams creates its
repartition topic up front (Faust creates only its tables' changelogs by itself).
"""

from __future__ import annotations

import logging
import os
import struct
import sys
import time
import uuid

import faust

bootstrap, source, sink, lines, words, partitions, words_topic_name = sys.argv[1:8]
expected = int(lines) * int(words)
app_id = f"bench-faust-{uuid.uuid4().hex[:6]}"
app = faust.App(
    app_id,
    broker=f"kafka://{bootstrap}",
    store="memory://",
    topic_partitions=int(partitions),
    web_enabled=False,
    consumer_auto_offset_reset="earliest",
)
lines_topic = app.topic(
    source, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw"
)
words_topic = app.topic(
    words_topic_name,
    key_type=bytes,
    value_type=bytes,
    key_serializer="raw",
    value_serializer="raw",
    partitions=int(partitions),
)
output = app.topic(sink, key_serializer="raw", value_serializer="raw")
counts = app.Table("counts", default=int, partitions=int(partitions))
timing = {"started": 0.0, "counted": 0}
pack = struct.Struct(">q").pack


@app.agent(lines_topic)
async def split(stream):  # type: ignore[no-untyped-def]
    async for line in stream:
        if not timing["started"]:
            timing["started"] = time.perf_counter()
        for word in line.decode().lower().split():
            encoded = word.encode()
            await words_topic.send(key=encoded, value=encoded)


@app.agent(words_topic)
async def count(stream):  # type: ignore[no-untyped-def]
    async for key, _word in stream.items():
        word = key.decode()
        counts[word] += 1
        await output.send(key=key, value=pack(counts[word]))
        timing["counted"] += 1
        if timing["counted"] == expected:
            elapsed = time.perf_counter() - timing["started"]
            print(f"LINES_PER_SECOND {int(lines) / elapsed:.1f}", file=sys.__stdout__, flush=True)
            os._exit(0)


if __name__ == "__main__":
    logging.disable(logging.WARNING)
    worker = faust.Worker(app, loglevel="ERROR", quiet=True, redirect_stdouts=False)
    worker.execute_from_commandline()
