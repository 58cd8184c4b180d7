"""Word count on Quix Streams, run by bench/python_peers.py inside Quix's own virtualenv.

The same data flow as kappaflow's and Java's word count: lines split into words, re-keyed by word through
a repartition topic (Quix's ``group_by``), counted in Quix's RocksDB state with its changelog, every count
produced to the output topic. Timed from the first line processed to the moment the counting stage has
seen every word, like the other rows; prints ``LINES_PER_SECOND <n>`` and exits.

    python quix_wordcount.py BOOTSTRAP SOURCE SINK LINES WORDS GUARANTEE STATE_DIR
"""

from __future__ import annotations

import sys
import time
import uuid

from quixstreams import Application


def main() -> int:
    bootstrap, source, sink, lines, words, guarantee, state_dir = sys.argv[1:8]
    expected = int(lines) * int(words)
    app = Application(
        broker_address=bootstrap,
        consumer_group=f"bench-quix-{uuid.uuid4().hex[:6]}",
        auto_offset_reset="earliest",
        processing_guarantee="exactly-once" if guarantee == "exactly_once_v2" else "at-least-once",
        state_dir=state_dir,
        loglevel="WARNING",
        # The fetch tuning every Python consumer in the bench gets (see bench/throughput.py).
        consumer_extra_config={"fetch.wait.max.ms": 50, "fetch.queue.backoff.ms": 20},
        producer_extra_config={"partitioner": "murmur2_random"},
    )
    timing = {"started": 0.0, "finished": 0.0, "counted": 0}

    def split(line: str) -> list[str]:
        if not timing["started"]:
            timing["started"] = time.perf_counter()
        return line.lower().split()

    def count(word: str, state) -> int:  # type: ignore[no-untyped-def]
        total = (state.get("count") or 0) + 1
        state.set("count", total)
        timing["counted"] += 1
        if timing["counted"] == expected:
            timing["finished"] = time.perf_counter()
            app.stop()
        return total

    lines_topic = app.topic(source, key_deserializer="bytes", value_deserializer="string")
    output = app.topic(sink, key_serializer="string", value_serializer="int")
    sdf = app.dataframe(lines_topic)
    sdf = sdf.apply(split, expand=True)
    sdf = sdf.group_by(
        lambda word: word,
        name="word",
        key_serializer="string",
        value_serializer="string",
        key_deserializer="string",
        value_deserializer="string",
    )
    sdf = sdf.apply(count, stateful=True)
    sdf.to_topic(output)
    app.run()
    if not timing["finished"]:
        print(f"counted {timing['counted']} of {expected} words", file=sys.stderr)
        return 1
    print(f"LINES_PER_SECOND {int(lines) / (timing['finished'] - timing['started']):.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
