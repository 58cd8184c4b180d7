"""The Python half of the conformance suite's topology families (java/Topologies.java is the Java half).

Each family is written once per side with the same conventions: keys and values are strings; a windowed
key goes out as ``key@start/end``; a joiner writes ``left+right`` with a missing side as ``null`` (Java's
string concatenation); numbers are decimal strings unless the output topic is declared ``long``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kappaflow import (
    BaseProcessor,
    BufferConfig,
    EmitStrategy,
    Joined,
    KStream,
    KTable,
    Materialized,
    PunctuationType,
    Record,
    Stores,
    StreamsBuilder,
    Suppressed,
    Topology,
    Windowed,
)
from kappaflow.api.processor import ProcessorContext
from kappaflow.api.serdes import Long, String
from kappaflow.dsl.windows import JoinWindows, SessionWindows, SlidingWindows, TimeWindows
from tests.conformance.conventions import Outputs, Params, join, s, starts_a
from tests.conformance.topologies_fkkv import fkkv_families
from tests.conformance.topologies_nm import naming_families
from tests.conformance.topologies_opt import optimized_families
from tests.conformance.topologies_vq import vq_families
from tests.conformance.topologies_vt import versioned_families


def windowed(key: Windowed[Any]) -> str:
    return f"{key.key}@{key.window.start}/{key.window.end}"


def num_sum(a: str, b: str) -> str:
    return str(int(a) + int(b))


def num_diff(a: str, b: str) -> str:
    return str(int(a) - int(b))


def time_windows(p: Params) -> TimeWindows:
    windows = (
        TimeWindows.of_size_and_grace(p["size"], p["grace"])
        if "grace" in p
        else TimeWindows.of_size_with_no_grace(p["size"])
    )
    return windows.advance_by(p["advance"]) if "advance" in p else windows


def sliding_windows(p: Params) -> SlidingWindows:
    if "grace" in p:
        return SlidingWindows.of_time_difference_and_grace(p["diff"], p["grace"])
    return SlidingWindows.of_time_difference_without_grace(p["diff"])


def session_windows(p: Params) -> SessionWindows:
    if "grace" in p:
        return SessionWindows.of_inactivity_gap_and_grace(p["gap"], p["grace"])
    return SessionWindows.of_inactivity_gap_with_no_grace(p["gap"])


def join_windows(p: Params) -> JoinWindows:
    windows = (
        JoinWindows.of_time_difference_and_grace(p["diff"], p["grace"])
        if "grace" in p
        else JoinWindows.of_time_difference_without_grace(p["diff"])
    )
    if "before" in p:
        windows = windows.before(p["before"])
    if "after" in p:
        windows = windows.after(p["after"])
    return windows


def windowed_out(table: KTable, long_values: bool = False) -> None:
    stream = table.to_stream().select_key(lambda k, v: windowed(k))
    stream.to("out", key_serde=String(), value_serde=Long() if long_values else String())


class Ticker(BaseProcessor):
    """Forwards every record; on each punctuation, ("tick", records seen so far) at the punctuation time."""

    def __init__(self, punctuation_type: PunctuationType, interval: int) -> None:
        self.type = punctuation_type
        self.interval = interval
        self.seen = 0

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        context.schedule(self.interval, self.type, self.tick)

    def tick(self, timestamp: int) -> None:
        self.context.forward(Record("tick", str(self.seen), timestamp))

    def process(self, record: Record[Any, Any]) -> None:
        self.seen += 1
        self.context.forward(record)


class Twice(BaseProcessor):
    """Forwards value@time, then "again" one millisecond later, keeping the key (a FixedKeyProcessor)."""

    def process(self, record: Record[Any, Any]) -> None:
        self.context.forward(record.with_value(f"{s(record.value)}@{record.timestamp}"))
        self.context.forward(Record(record.key, "again", record.timestamp + 1, record.headers))


class KeyEquals:
    """A ValueTransformerWithKey writing ``key=value``, a null value staying null."""

    def init(self, context: ProcessorContext) -> None:
        pass

    def transform(self, key: str, value: str | None) -> str | None:
        return None if value is None else f"{key}={value}"

    def close(self) -> None:
        pass


def _stateless(b: StreamsBuilder, family: str, p: Params) -> Outputs | None:
    stream: KStream = b.stream("in")
    out: Outputs = {"out": "string"}
    if family == "filter":
        stream.filter(lambda k, v: starts_a(v)).to("out")
    elif family == "filter_not":
        stream.filter_not(lambda k, v: starts_a(v)).to("out")
    elif family == "map":
        stream.map(lambda k, v: (v, k)).to("out")
    elif family == "map_values":
        stream.map_values(lambda v: None if v is None else v.upper()).to("out")
    elif family == "map_values_with_key":
        stream.map_values(lambda k, v: f"{s(k)}:{s(v)}").to("out")
    elif family == "flat_map":
        stream.flat_map(lambda k, v: [(part, k) for part in v.split(",")]).to("out")
    elif family == "flat_map_values":
        stream.flat_map_values(lambda v: v.split(",")).to("out")
    elif family == "select_key":
        stream.select_key(lambda k, v: v[:1]).to("out")
    elif family == "peek":
        stream.peek(lambda k, v: None).to("out")
    elif family == "branch":
        branches = (
            stream.split("b-")
            .branch(lambda k, v: starts_a(v), name="a")
            .branch(lambda k, v: v is not None and v.startswith("b"), name="b")
            .default_branch(name="rest")
        )
        for name in ("a", "b", "rest"):
            branches[f"b-{name}"].to(f"out-{name}")
        out = {"out-a": "string", "out-b": "string", "out-rest": "string"}
    elif family == "branch_no_default":
        parts = (
            stream.split("b-")
            .branch(lambda k, v: starts_a(v), name="x")
            .branch(lambda k, v: v is not None and len(v) > 3, name="y")
            .no_default_branch()
        )
        parts["b-x"].to("out-a")
        parts["b-y"].to("out-b")
        out = {"out-a": "string", "out-b": "string"}
    elif family == "merge":
        stream.merge(b.stream("in2")).to("out")
    elif family == "repartition":
        stream.select_key(lambda k, v: v).repartition().map_values(lambda k, v: f"{k}<{v}").to("out")
    elif family == "process_values":
        stream.process_values(lambda: Twice()).to("out")
    elif family == "to_table":
        stream.to_table(Materialized.as_("store")).to_stream().to("out")
    elif family == "punctuate_stream":
        stream.process(lambda: Ticker(PunctuationType.STREAM_TIME, p["interval"])).to("out")
    elif family == "punctuate_wall":
        stream.process(lambda: Ticker(PunctuationType.WALL_CLOCK_TIME, p["interval"])).to("out")
    else:
        return None
    return out


def _tables(b: StreamsBuilder, family: str, p: Params) -> Outputs | None:
    if family == "table_join":
        left: KTable = b.table("left", materialized="left-store")
        right: KTable = b.table("right", materialized="right-store")
        kind = p.get("kind", "inner")
        joined = getattr(left, {"inner": "join", "left": "left_join", "outer": "outer_join"}[kind])(
            right, join
        )
        joined.to_stream().to("out")
        return {"out": "string"}
    if family == "table_suppress_join":
        left = b.table("left", materialized="left-store")
        right = b.table("right", materialized="right-store")
        suppressed = left.suppress(Suppressed.until_time_limit(p["limit"], BufferConfig.unbounded()))
        joined = right.join(suppressed, join) if p.get("suppressed_right") else suppressed.join(right, join)
        joined.to_stream().to("out")
        return {"out": "string"}
    if family == "table_transform_values":
        b.table("in", materialized="store").transform_values(KeyEquals).to_stream().to("out")
        return {"out": "string"}
    if not family.startswith("table_"):
        return None
    table: KTable = b.table("in", materialized=None if p.get("unmaterialized_source") else "store")
    if family == "table_source":
        table.to_stream().to("out")
    elif family == "table_filter":
        mat = "filtered" if p.get("materialized") else None
        table.filter(lambda k, v: starts_a(v), mat).to_stream().to("out")
    elif family == "table_filter_not":
        table.filter_not(lambda k, v: starts_a(v)).to_stream().to("out")
    elif family == "table_map_values":
        mat = "mapped" if p.get("materialized") else None
        table.map_values(lambda v: v.upper(), mat).to_stream().to("out")
    elif family == "table_group_count":
        table.group_by(lambda k, v: (v, k)).count("counts").to_stream().to("out", value_serde=Long())
        return {"out": "long"}
    elif family == "table_group_reduce":
        table.group_by(lambda k, v: (k[:1], v)).reduce(num_sum, num_diff, "sums").to_stream().to("out")
    elif family == "table_group_aggregate":
        table.group_by(lambda k, v: (k[:1], v)).aggregate(
            lambda: "", lambda k, v, a: f"{a}+{v}", lambda k, v, a: f"{a}-{v}", "agg"
        ).to_stream().to("out")
    elif family == "table_suppress_time":
        buffer = BufferConfig.unbounded()
        table.suppress(Suppressed.until_time_limit(p["limit"], buffer)).to_stream().to("out")
    elif family == "table_suppress_records":
        buffer = BufferConfig.max_records(p["records"])
        table.suppress(Suppressed.until_time_limit(p["limit"], buffer)).to_stream().to("out")
    elif family == "table_suppress_group_count":
        suppressed = table.suppress(Suppressed.until_time_limit(p["limit"], BufferConfig.unbounded()))
        suppressed.group_by(lambda k, v: (v, k)).count("counts").to_stream().to("out", value_serde=Long())
        return {"out": "long"}
    else:
        return None
    return {"out": "string"}


def _aggregations(b: StreamsBuilder, family: str, p: Params) -> Outputs | None:
    stream: KStream = b.stream("in")
    if family == "count":
        store = Materialized.as_("store")
        if "store_caching" in p:
            store = store.with_caching_enabled() if p["store_caching"] else store.with_caching_disabled()
        split = stream.flat_map_values(lambda v: [""] if v is None else v.split(","))
        split.group_by_key().count(store).to_stream().to("out", value_serde=Long())
        return {"out": "long"}
    if family == "count_plain":
        stream.group_by_key().count("store").to_stream().to("out", value_serde=Long())
        return {"out": "long"}
    if family == "reduce":
        stream.group_by_key().reduce(lambda a, v: f"{a},{v}", "store").to_stream().to("out")
    elif family == "aggregate":
        stream.group_by_key().aggregate(lambda: "", lambda k, v, a: a + v, "store").to_stream().to("out")
    elif family == "group_by_count":
        stream.group_by(lambda k, v: v).count("store").to_stream().to("out", value_serde=Long())
        return {"out": "long"}
    elif family == "group_by_reduce":
        stream.group_by(lambda k, v: v[:1]).reduce(lambda a, v: f"{a},{v}", "store").to_stream().to("out")
    elif family == "flat_map_count":
        counts = (
            stream.flat_map(lambda k, v: [(part, k) for part in v.split(",")]).group_by_key().count("store")
        )
        counts.to_stream().to("out", value_serde=Long())
        return {"out": "long"}
    elif family == "cogroup_repartition":
        two = b.stream("in2").group_by(lambda k, v: v[:1])
        (
            stream.group_by_key()
            .cogroup(lambda k, v, a: f"{a}L{v}")
            .cogroup(two, lambda k, v, a: f"{a}R{v}")
            .aggregate(lambda: "", "store")
            .to_stream()
            .to("out")
        )
    elif family == "cogroup":
        two = b.stream("in2").group_by_key()
        (
            stream.group_by_key()
            .cogroup(lambda k, v, a: f"{a}L{v}")
            .cogroup(two, lambda k, v, a: f"{a}R{v}")
            .aggregate(lambda: "", "store")
            .to_stream()
            .to("out")
        )
    else:
        return None
    return {"out": "string"}


def _windows(b: StreamsBuilder, family: str, p: Params) -> Outputs | None:
    kind, _, op = family.partition("_")
    maker: dict[str, Callable[[Params], Any]] = {
        "window": time_windows,
        "sliding": sliding_windows,
        "session": session_windows,
    }
    if kind == "cogroup" and op == "window":
        _cogroup_windowed(b, p)
        return {"out": "string"}
    if kind not in maker:
        return None
    windowed_stream = b.stream("in").group_by_key().windowed_by(maker[kind](p))
    if op == "emit_final":
        windowed_stream = windowed_stream.emit_strategy(EmitStrategy.on_window_close())
    store = Materialized.as_("store")
    if op in ("count", "suppress", "emit_final"):
        store = store.with_key_serde(String()).with_value_serde(Long())
        if "retention" in p:
            store = store.with_retention(p["retention"])
        counts = windowed_stream.count(store)
        if op == "suppress":
            counts = counts.suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
        windowed_out(counts, long_values=True)
        return {"out": "long"}
    if op == "reduce":
        windowed_out(windowed_stream.reduce(lambda a, v: f"{a},{v}", store))
    elif op == "aggregate" and kind == "session":
        windowed_out(
            windowed_stream.aggregate(lambda: "", lambda k, v, a: a + v, lambda k, x, y: f"{x}|{y}", store)
        )
    elif op == "aggregate":
        windowed_out(windowed_stream.aggregate(lambda: "", lambda k, v, a: a + v, store))
    else:
        return None
    return {"out": "string"}


def _cogroup_windowed(b: StreamsBuilder, p: Params) -> None:
    cogrouped = (
        b.stream("in")
        .group_by_key()
        .cogroup(lambda k, v, a: f"{a}L{v}")
        .cogroup(b.stream("in2").group_by_key(), lambda k, v, a: f"{a}R{v}")
    )
    windows = p.get("windows", "time")
    if windows == "session":
        session = cogrouped.windowed_by(session_windows(p))
        windowed_out(session.aggregate(lambda: "", lambda k, x, y: f"{x}|{y}", "store"))
    else:
        maker = time_windows if windows == "time" else sliding_windows
        windowed_out(cogrouped.windowed_by(maker(p)).aggregate(lambda: "", "store"))


def _joins(b: StreamsBuilder, family: str, p: Params) -> Outputs | None:
    kind = p.get("kind", "inner")
    method = {"inner": "join", "left": "left_join", "outer": "outer_join"}[kind]
    if family == "stream_join":
        left: KStream = b.stream("left")
        getattr(left, method)(b.stream("right"), join, join_windows(p)).to("out")
    elif family == "stream_join_rekeyed":
        left = b.stream("left").select_key(lambda k, v: v[:1])
        right = b.stream("right").select_key(lambda k, v: v[:1])
        left.left_join(right, join, join_windows(p)).to("out")
    elif family == "stream_table_join_rekeyed":
        left = b.stream("left").select_key(lambda k, v: v[:1])
        left.left_join(b.table("right", materialized="right-store"), join).to("out")
    elif family == "stream_self_join":
        stream: KStream = b.stream("in")
        stream.join(stream, join, join_windows(p)).to("out")
    elif family == "stream_table_join":
        left = b.stream("left")
        if "grace" in p:
            versioned = Stores.persistent_versioned_key_value_store("right-store", p["history"])
            right = b.table("right", materialized=Materialized.as_(versioned))
            joined = Joined.as_("j").with_grace_period(p["grace"])
            getattr(left, method)(right, join, joined).to("out")
        else:
            getattr(left, method)(b.table("right", materialized="right-store"), join).to("out")
    elif family == "stream_global_join":
        left = b.stream("left")
        right = b.global_table("right", materialized="right-store")
        getattr(left, method)(right, lambda k, v: v.split(":")[0] if v and ":" in v else None, join).to("out")
    elif family == "fk_join":
        table: KTable = b.table("left", materialized="left-store")
        other: KTable = b.table("right", materialized="right-store")

        def foreign_key(value: str) -> str | None:
            return value.split("|")[0] if "|" in value else None

        getattr(table, method)(other, foreign_key, join).to_stream().to("out")
    else:
        return None
    return {"out": "string"}


# ================================================================ ph- block (issue 27 items 4-7, 9)
def meta(context: ProcessorContext) -> str:
    """Java's ``recordMetadata().map(topic/partition/offset).orElse("none")``."""
    found = context.record_metadata()
    return "none" if found is None else f"{s(found.topic)}/{found.partition}/{found.offset}"


class PunctuationChain(BaseProcessor):
    """Punctuation-queue rules (java: PunctuationChain): A schedules B on its first run and cancels C on
    its second; B cancels itself after its third run; outputs carry the record metadata seen."""

    def __init__(self, punctuation_type: PunctuationType, interval: int, inner: int) -> None:
        self.type = punctuation_type
        self.interval = interval
        self.inner = inner
        self.a_runs = self.b_runs = 0
        self.b: Any = None
        self.c: Any = None

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        context.schedule(self.interval, self.type, self.tick_a)
        self.c = context.schedule(self.interval, self.type, self.tick_c)

    def tick_a(self, ts: int) -> None:
        self.a_runs += 1
        self.context.forward(Record("A", f"{ts}|{meta(self.context)}", ts))
        if self.a_runs == 1:
            self.b = self.context.schedule(self.inner, self.type, self.tick_b)
        elif self.a_runs == 2:
            self.c.cancel()

    def tick_b(self, ts: int) -> None:
        self.b_runs += 1
        self.context.forward(Record("B", f"{ts}|{meta(self.context)}", ts))
        if self.b_runs == 3:
            self.b.cancel()

    def tick_c(self, ts: int) -> None:
        self.context.forward(Record("C", f"{ts}|{meta(self.context)}", ts))

    def process(self, record: Record[Any, Any]) -> None:
        self.context.forward(record.with_value(f"{s(record.value)}|{meta(self.context)}"))


class FailingTicker(BaseProcessor):
    """Forwards each record (throws on "boom"); every 10 ms of stream time forwards ("tick", seen), then
    throws when seen is even (java: FailingTicker)."""

    def __init__(self) -> None:
        self.seen = 0

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        context.schedule(10, PunctuationType.STREAM_TIME, self.tick)

    def tick(self, ts: int) -> None:
        self.context.forward(Record("tick", str(self.seen), ts))
        if self.seen % 2 == 0:
            raise RuntimeError(f"punctuator failed at {ts}")

    def process(self, record: Record[Any, Any]) -> None:
        self.seen += 1
        if record.value == "boom":
            raise RuntimeError(f"processor failed on {record.key}")
        self.context.forward(record)


def fail_on(value: str, marker: str) -> str:
    if value is not None and marker in value:
        raise RuntimeError(f"failing on {value}")
    return value


def _ph(b: StreamsBuilder, family: str, p: Params) -> Outputs | None:
    out: Outputs = {"out": "string"}
    if family == "ph_punctuation_queue":
        kind = PunctuationType.WALL_CLOCK_TIME if p.get("type") == "wall" else PunctuationType.STREAM_TIME
        b.stream("in").process(lambda: PunctuationChain(kind, p["interval"], p["inner"])).to("out")
    elif family == "ph_handler_siblings":
        stream: KStream = b.stream("in")
        stream.map_values(lambda v: fail_on(v, "x").upper()).to("out-a")
        stream.map_values(lambda v: f"{s(v)}!").to("out-b")
        stream.group_by_key().count("counts").to_stream().to("out-c", value_serde=Long())
        out = {"out-a": "string", "out-b": "string", "out-c": "long"}
    elif family == "ph_handler_chain":
        stream = b.stream("in")
        upper = stream.filter(lambda k, v: v is not None).map_values(lambda v: v.upper())
        upper.map_values(lambda v: fail_on(v, "X") + "?").to("out-a")
        upper.map_values(lambda v: v + "!").to("out-b")
        stream.flat_map_values(lambda v: v.split(",")).map_values(lambda v: fail_on(v, "x") + "#").to("out-c")
        out = {"out-a": "string", "out-b": "string", "out-c": "string"}
    elif family == "ph_handler_punctuate":
        b.stream("in").process(FailingTicker).map_values(lambda v: fail_on(v, "x") + ".").to("out")
    elif family == "ph_order_repartitions":
        parts = (
            b.stream("in")
            .flat_map(lambda k, v: [(part, f"{k}:{part}") for part in v.split(",")])
            .repartition()
        )
        parts.map_values(lambda v: "1:" + v).to("out")
        parts.select_key(lambda k, v: k + "'").repartition().map_values(lambda v: "2:" + v).to("out")
    elif family == "ph_order_merge":
        rekeyed = b.stream("in").select_key(lambda k, v: v).repartition()
        rekeyed.merge(b.stream("in2")).map_values(lambda k, v: f"{k}={v}").to("out")
    elif family == "ph_order_ticker":
        interval = p["interval"]
        b.stream("in").filter(lambda k, v: starts_a(v)).repartition().process(
            lambda: Ticker(PunctuationType.STREAM_TIME, interval)
        ).to("out")
    elif family == "ph_suppress_bytes":
        table: KTable = b.table("in", materialized="store")
        table.suppress(
            Suppressed.until_time_limit(p["limit"], BufferConfig.max_bytes(p["bytes"]))
        ).to_stream().to("out")
    elif family == "ph_suppress_bytes_group":
        counts = b.stream("in").group_by_key().count("counts")
        suppressed = counts.suppress(
            Suppressed.until_time_limit(p["limit"], BufferConfig.max_bytes(p["bytes"]))
        )
        suppressed.to_stream().to("out", value_serde=Long())
        out = {"out": "long"}
    else:
        return None
    return out


# ================================================================ end of the ph- block


FAMILIES = (
    _stateless,
    _tables,
    _aggregations,
    _windows,
    _joins,
    _ph,
    versioned_families,
    naming_families,
    fkkv_families,
    vq_families,
    optimized_families,
)


def build(family: str, params: Params) -> tuple[Topology, Outputs]:
    """The kappaflow topology of a family and its output topics (name -> "string" | "long")."""
    for section in FAMILIES:
        builder = StreamsBuilder()
        outputs = section(builder, family, params)
        if outputs is not None:
            # the opt- families (topologies_opt.py) are built with their topology.optimization
            props = {"topology.optimization": params["optimization"]} if "optimization" in params else None
            return builder.build(props), outputs
    raise KeyError(f"unknown topology family {family!r}")
