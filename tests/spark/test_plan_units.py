"""Pure pieces of reprocessing, no Spark or broker: offset specs, stage order, record order per task."""

from __future__ import annotations

from collections import Counter

import pytest

from kappaflow import Materialized, StreamsBuilder, TimeWindows, serdes
from kappaflow.api.errors import StreamsError
from kappaflow.clients.murmur2 import murmur2, partition_for_key
from kappaflow.spark.batches import batch_records, encode_batch
from kappaflow.spark.executor import (
    SEQUENCE_SHIFT,
    SparkCollector,
    StageJob,
    _ordered_records,
)
from kappaflow.spark.reprocess import parse_offsets, stage_order
from kappaflow.spark.splits import (
    key_slot,
    key_splittable,
    offset_chunks,
    split_count,
    splittable,
    task_slots,
)
from kappaflow.tasks.drain import RawRecord
from tests.kafka.streams_support import wordcount_topology


def test_offset_specs():
    assert parse_offsets("earliest", "earliest") == "earliest"
    assert parse_offsets(" latest ", "latest") == "latest"
    assert parse_offsets('{"t": {"0": 5, "1": 7}}', "latest") == {"t": {0: 5, 1: 7}}
    with pytest.raises(StreamsError, match="earliest, latest or JSON"):
        parse_offsets("yesterday", "earliest")


def test_stages_run_after_the_stages_feeding_their_repartition_topics():
    topology = wordcount_topology("lines", "counts")
    order = stage_order(topology)
    assert [s.id for s in order] == [0, 1]
    assert "counts-repartition" in order[1].source_topics

    builder = StreamsBuilder()
    stream = builder.stream("in", key_serde=serdes.String(), value_serde=serdes.String())
    first = stream.group_by(lambda _k, v: v, key_serde=serdes.String(), value_serde=serdes.String()).count(
        Materialized.as_("first").with_value_serde(serdes.Long())
    )
    first.to_stream().map(lambda k, v: (str(v), k)).group_by_key(
        key_serde=serdes.String(), value_serde=serdes.String()
    ).count(Materialized.as_("second").with_value_serde(serdes.Long()))
    chained = builder.build()
    ids = [s.id for s in stage_order(chained)]
    assert sorted(ids) == [0, 1, 2]
    position = {sub_id: i for i, sub_id in enumerate(ids)}
    for sub in chained.sub_topologies():
        for topic in sub.source_topics:
            for writer in chained.sub_topologies():
                if topic in chained.internal_topics and topic in writer.sink_topics:
                    assert position[writer.id] < position[sub.id]


def test_records_reach_a_task_in_offset_order_and_repartitioned_ones_merged_by_time():
    rows = [
        (0, "in", 0, 2, 30, b"k", b"c", None),
        (0, "in", 0, 0, 10, b"k", b"a", None),
        (0, "in", 0, 1, 20, b"k", b"b", [("h", b"1")]),
        # Two upstream tasks' batches for the same repartition partition, each in emit order.
        (0, "app-x-repartition", 0, encode_batch(0, 2, [(5, b"u", b"0a", None), (25, b"u", b"0b", None)])),
        (0, "app-x-repartition", 1, encode_batch(0, 2, [(15, b"v", b"1a", None), (12, b"v", b"1b", None)])),
    ]
    ordered = {tp: [RawRecord(*raw) for raw in queued] for tp, queued in _ordered_records(rows, {}).items()}
    assert [(r.offset, r.value) for r in ordered[("in", 0)]] == [(0, b"a"), (1, b"b"), (2, b"c")]
    assert ordered[("in", 0)][1].headers.to_list() == [("h", b"1")]
    merged = ordered[("app-x-repartition", 0)]
    # Stable timestamp merge that never reorders one upstream's records (1a before 1b despite 15 > 12).
    assert [r.value for r in merged] == [b"0a", b"1a", b"1b", b"0b"]
    assert [r.offset for r in merged] == [0, 1, 2, 3]


def test_chunks_of_one_upstream_partition_are_concatenated_in_offset_order_whatever_their_timestamps():
    """A split stage's chunks arrive in any order; their batches carry (base, span), and one upstream
    partition's chunks are concatenated by base - never merged by timestamp, which would interleave them.
    Batches whose ranges overlap (not chunks of one partition) are merged by timestamp instead."""
    late, early = 10 << SEQUENCE_SHIFT, 0
    rows = [
        (0, "app-x-repartition", 0, encode_batch(late, 2, [(1, b"k", b"c", None), (2, b"k", b"d", None)])),
        (0, "app-x-repartition", 0, encode_batch(early, 3, [(50, b"k", b"a", None), (60, b"k", b"b", None)])),
    ]
    ordered = _ordered_records(rows, {})[("app-x-repartition", 0)]
    assert [r[3] for r in ordered] == [b"a", b"b", b"c", b"d"]
    assert [r[0] for r in ordered] == [0, 1, 2, 3]
    overlapping = [
        (0, "app-x-repartition", 0, encode_batch(0, 2, [(1, b"k", b"x1", None), (30, b"k", b"x2", None)])),
        (0, "app-x-repartition", 0, encode_batch(1, 2, [(10, b"k", b"y1", None), (20, b"k", b"y2", None)])),
    ]
    ordered = _ordered_records(overlapping, {})[("app-x-repartition", 0)]
    assert [r[3] for r in ordered] == [b"x1", b"y1", b"y2", b"x2"]


def test_a_stage_shuffles_its_own_batches_only_into_a_single_input_reader():
    """The word count's first stage shuffles straight into the count's slots, its stats rows in slot 0,
    whose task hands them on after its own; a repartition topic read together with another input (a
    join) takes the persisted path."""
    from kappaflow.dsl.windows import JoinWindows
    from kappaflow.spark.shuffle import direct_shuffle_topic, slot_pair

    topology = wordcount_topology("lines", "counts")
    stages = stage_order(topology)
    repartition = ["app-counts-repartition"]
    assert direct_shuffle_topic(stages[0], stages, topology, "app", repartition) == "app-counts-repartition"
    assert direct_shuffle_topic(stages[1], stages, topology, "app", repartition) is None  # writes no shuffle
    builder = StreamsBuilder()
    left = builder.stream("left").select_key(lambda k, v: v)
    left.join(builder.stream("right"), lambda k, a, b: a, JoinWindows.of_time_difference_and_grace(10, 0)).to(
        "out"
    )
    joined = builder.build()
    join_stages = stage_order(joined)
    topic = joined.resolve_topic(next(iter(joined.internal_topics)), "app")
    writer = next(s for s in join_stages if s.sink_topics)
    assert direct_shuffle_topic(writer, join_stages, joined, "app", [topic]) is None
    pairs = [slot_pair(("R", 2, "t", 0, b"batch")), slot_pair(("S", 0, "{}"))]
    assert pairs == [(2, (2, "t", 0, b"batch")), (0, ("S", 0, "{}"))]


def test_offset_ranges_cover_a_partition_in_order_and_only_stateless_stages_split():
    assert offset_chunks(10, 20, 3) == [(10, 13), (13, 16), (16, 20)]
    assert offset_chunks(0, 2, 5) == [(0, 1), (1, 2)]  # never an empty chunk ...
    assert offset_chunks(7, 7, 4) == [(7, 7)]  # ... but an empty range still runs (and reports)
    assert task_slots("local[4]", 2) == 4 and task_slots("local", 2) == 1 and task_slots("k8s://x", 6) == 6
    assert split_count(None, 2, 4, 100_000) == 1  # 4 partitions already fill 2 slots twice
    assert split_count(None, 4, 2, 100_000) == 4
    assert split_count(None, 4, 2, 30_000) == 1  # chunks would be too small to pay for their tasks
    assert split_count(3, 1, 8, 10) == 3
    assert split_count(None, 2, 1, 1_000_000, per_core=1) == 2  # offset chunks: one per core
    assert split_count(None, 1, 1, 1_000_000, per_core=1) == 1
    first, second = stage_order(wordcount_topology("lines", "counts"))
    assert splittable(first, ["lines"], ["lines"], ["app-counts-repartition"], ["app-counts-repartition"])
    assert not splittable(first, ["lines"], ["lines"], ["out"], [])  # outputs would interleave chunks
    assert not splittable(second, ["app-counts-repartition"], [], ["counts"], ["app-counts-repartition"])


def test_a_stage_with_a_user_processor_is_not_split():
    """A user processor may keep state in memory or punctuate on stream time, which each chunk would
    start afresh: only the DSL's own stateless processors run split."""
    builder = StreamsBuilder()
    text = serdes.String()
    lines = builder.stream("lines", key_serde=text, value_serde=text)
    lines.process(lambda record, context: context.forward(record)).group_by(
        lambda _key, value: value, key_serde=text, value_serde=text
    ).count(Materialized.as_("counts"))
    first = stage_order(builder.build())[0]
    assert not splittable(first, ["lines"], ["lines"], ["app-counts-repartition"], ["app-counts-repartition"])


def test_worker_daemon_drops_sparks_archives_only_where_pyspark_is_installed(tmp_path):
    """Spark's zips and jars leave the workers' path when installed pyspark and py4j can replace them;
    a path where the archives are the only pyspark keeps them (a bare Spark distribution)."""
    from kappaflow.spark.daemon import installed_path

    archives = [tmp_path / "pyspark.zip", tmp_path / "py4j-0.10.9.9-src.zip", tmp_path / "spark-core.jar"]
    for archive in archives:
        archive.write_bytes(b"")
    installed = tmp_path / "site-packages"
    for package in ("pyspark", "py4j"):
        (installed / package).mkdir(parents=True)
        (installed / package / "__init__.py").write_text("")
    user_zip, missing = str(tmp_path / "deps.zip"), str(tmp_path / "python311.zip")
    (tmp_path / "deps.zip").write_bytes(b"")
    path = [str(tmp_path), *map(str, archives), user_zip, missing, str(installed)]
    assert installed_path(path) == [str(tmp_path), user_zip, missing, str(installed)]
    bare = [p for p in path if p != str(installed)]
    assert installed_path(bare) == bare


def test_timestamp_merge_fast_path_orders_exactly_like_heapq_merge():
    """The sort taken when every run is in timestamp order must give heapq.merge's sequence: ties go to
    the earlier run, and a run out of timestamp order (the fallback) is never reordered."""
    import heapq
    import random

    from kappaflow.spark.batches import merge_by_timestamp

    rng = random.Random(3)
    for ordered in (True, False):
        for _ in range(50):
            runs = []
            for run_no in range(rng.randint(1, 4)):
                stamps = [rng.randint(0, 6) for _ in range(rng.randint(0, 12))]
                stamps = sorted(stamps) if ordered else stamps
                runs.append([(ts, f"{run_no}-{i}".encode(), None, None) for i, ts in enumerate(stamps)])
            expected = list(heapq.merge(*runs, key=lambda e: e[0]))
            assert list(merge_by_timestamp(runs)) == expected


def _keyed_stage(build: object) -> tuple[bool, object]:
    """key_splittable of the stage reading `app-<store>-repartition` in the topology `build()` returns."""
    topology = build()  # type: ignore[operator]
    repartition = [f"app-{t}" for t, spec in topology.internal_topics.items() if spec.kind == "repartition"]
    verdicts = []
    for sub in stage_order(topology):
        sources = [topology.resolve_topic(t, "app") for t in sub.source_topics]
        sinks = [topology.resolve_topic(t, "app") for t in sub.sink_topics]
        if any(t in repartition for t in sources):
            verdicts.append(key_splittable(sub, sources, sinks, repartition, topology.stores))
    assert len(verdicts) == 1
    return verdicts[0], topology


def test_only_a_keyed_stage_after_a_repartition_splits_by_key():
    """Per-key state with key-preserving processors splits; stream time, key changes, a stateful op on the
    user topic itself or a TTL store (which expires on stream time) do not."""
    text = serdes.String()

    def grouped() -> object:
        builder = StreamsBuilder()
        lines = builder.stream("lines", key_serde=text, value_serde=text)
        return builder, lines.group_by(lambda _k, v: v, key_serde=text, value_serde=text)

    def counting(then: object) -> object:
        def build() -> object:
            builder, group = grouped()
            then(group.count(Materialized.as_("counts")))  # type: ignore[operator]
            return builder.build()  # type: ignore[attr-defined]

        return build

    assert _keyed_stage(lambda: wordcount_topology("lines", "out"))[0]
    assert _keyed_stage(counting(lambda t: t.filter(lambda _k, v: v > 1).to_stream().to("out")))[0]
    assert not _keyed_stage(counting(lambda t: t.to_stream().select_key(lambda k, _v: k[:1]).to("out")))[0]
    assert not _keyed_stage(counting(lambda t: t.to_stream().map(lambda k, v: (v, k)).to("out")))[0]
    assert not _keyed_stage(counting(lambda t: t.to_stream().process(lambda r, c: c.forward(r))))[0]

    def windowed() -> object:
        builder, group = grouped()
        group.windowed_by(TimeWindows.of_size_with_no_grace(1000)).count(Materialized.as_("w"))
        return builder.build()  # type: ignore[attr-defined]

    assert not _keyed_stage(windowed)[0]

    def with_ttl() -> object:
        builder, group = grouped()
        group.count(Materialized.as_("counts").with_ttl(60_000))
        return builder.build()  # type: ignore[attr-defined]

    assert not _keyed_stage(with_ttl)[0]
    first, _second = stage_order(wordcount_topology("lines", "out"))
    assert not key_splittable(first, ["lines"], ["app-counts-repartition"], ["app-counts-repartition"], {})


def test_key_slots_spread_a_partition_and_keep_murmur2_placement():
    hashes = [murmur2(f"w{i}".encode()) & 0x7FFFFFFF for i in range(1000)]
    for partitions, splits in ((1, 4), (4, 1), (4, 3)):
        slots = [key_slot(h, h % partitions, partitions, splits) for h in hashes]
        assert [s // splits for s in slots] == [h % partitions for h in hashes]  # the partition is kept
        spread = Counter(slots)
        assert sorted(spread) == list(range(partitions * splits))
        assert min(spread.values()) > 0.7 * len(hashes) / (partitions * splits)


def test_the_collector_sends_each_key_to_its_slot():
    """Repartitioned records go to partition * splits + sub for a key-split topic, to the partition
    otherwise; a keyless record to its partition's first slot."""
    counts = {"app-r": 2, "app-s": 2}
    job = StageJob(lambda: None, {}, 0, counts, ["app-r", "app-s"], [], {}, None, key_splits={"app-r": 3})  # type: ignore[arg-type, return-value]
    collector = SparkCollector(job, 1)
    for i in range(50):
        collector.send("app-r", f"k{i}".encode(), b"v", None, i, None)
        collector.send("app-s", f"k{i}".encode(), b"v", None, i, None)
    collector.send("app-r", None, b"v", None, 0, None)
    rows = collector.shuffle_rows()
    by_topic: dict[str, set[int]] = {}
    for _r, target, topic, _source, batch in rows:
        by_topic.setdefault(topic, set()).add(target)
        for entry in batch_records(batch):
            if entry[1] is not None:
                hashed = murmur2(entry[1]) & 0x7FFFFFFF
                expected = (
                    key_slot(hashed, hashed % 2, 2, 3) if topic == "app-r" else partition_for_key(entry[1], 2)
                )
                assert target == expected
            else:
                assert target == 1 * 3  # the task partition's first slot
    assert by_topic == {"app-r": set(range(6)), "app-s": {0, 1}}


def test_a_stage_hands_on_the_stats_of_the_stages_that_shuffled_into_it():
    """The stats rows that rode in slot 0 of a direct shuffle reach the driver through the reading
    stage's tasks: they are not taken for task input, and come out unchanged after the slot's own rows."""
    from kappaflow.spark.executor import StageJob, run_partitions

    job = StageJob(wordcount_topology("lines", "counts"), {"application.id": "app"}, 1, {}, [], [], {}, None)
    upstream = [("S", 0, '{"task": "0_0"}'), ("S", 0, '{"task": "0_0", "n": 2}')]
    assert list(run_partitions(job, iter(upstream))) == upstream
