"""The "nm_" topology families (issue 27: generated names, `Branched`, the old-style transformer context);
java/NamingTopologies.java is their Java half. Kept apart from topologies.py so the families other work
adds there do not collide with these."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kappaflow import Branched, Grouped, Repartitioned, StreamsBuilder
from kappaflow.api.processor import ValueTransformerContext
from kappaflow.dsl.windows import JoinWindows, SessionWindows, SlidingWindows, TimeWindows


class ContextEcho:
    """Writes ``value|topic/partition/offset/timestamp/header count`` from the old-style context."""

    context: ValueTransformerContext

    def init(self, context: ValueTransformerContext) -> None:
        self.context = context

    def transform(self, key: str, value: str | None) -> str:
        c = self.context
        value_text = "null" if value is None else value
        topic = "null" if c.topic() is None else c.topic()
        return f"{value_text}|{topic}/{c.partition()}/{c.offset()}/{c.timestamp()}/{len(list(c.headers()))}"

    def close(self) -> None:
        pass


def _prefixed(prefix: str) -> Callable[[str], str]:
    return lambda value: f"{prefix}:{value}"


def naming_families(b: StreamsBuilder, family: str, p: dict[str, Any]) -> dict[str, str] | None:
    if family == "nm_transform_values_context":
        b.table("in").transform_values(ContextEcho).to_stream().to("out")
        return {"out": "string"}
    if family == "nm_branched":
        branches = (
            b.stream("in")
            .split()
            .branch(
                lambda k, v: v.startswith("a"),
                Branched.with_function(lambda s: s.map_values(lambda v: v + "!")),
            )
            .branch(lambda k, v: v.startswith("b"), Branched.with_consumer(lambda s: s.to("out-b")))
            .branch(lambda k, v: v.startswith("c"), Branched.with_function(lambda s: None, "c"))
            .default_branch()
        )
        assert len(branches) == 2, sorted(branches)
        for name, stream in sorted(branches.items()):
            stream.map_values(_prefixed(name)).to("out")
        return {"out": "string", "out-b": "string"}
    if family == "nm_two_globals":
        first = b.global_table("g1")
        stream = b.stream("in").filter(lambda k, v: v is not None, name="present")
        joined = stream.join(first, lambda k, v: v, lambda v, g: f"{v}+{g}")
        second = b.global_table("g2", materialized="second")
        joined.left_join(second, lambda k, v: k, lambda v, g: f"{v}+{'null' if g is None else g}").to("out")
        stream.select_key(lambda k, v: v).group_by_key().count().to_stream().map_values(str).to("out-count")
        return {"out": "string", "out-count": "string"}
    if family == "nm_named_ops":
        left = b.stream("in").select_key(lambda k, v: v)
        right = b.stream("in2").select_key(lambda k, v: v)
        windows = JoinWindows.of_time_difference_without_grace(10)
        left.join(right, lambda a, c: f"{a}+{c}", windows, name="sj").to("out")
        left.to_table().to_stream().to("out-table")
        (
            left.repartition(Repartitioned.as_("rp"))
            .group_by_key(grouped=Grouped.as_("g"))
            .windowed_by(TimeWindows.of_size_with_no_grace(10))
            .count()
            .to_stream()
            .select_key(lambda k, v: f"{k.key}@{k.window.start}")
            .map_values(str)
            .to("out-count")
        )
        return {"out": "string", "out-count": "string", "out-table": "string"}  # sorted, as the Java half
    if family == "nm_unnamed_windows":
        grouped = b.stream("in").group_by_key()
        (
            grouped.windowed_by(TimeWindows.of_size_with_no_grace(10))
            .count()
            .to_stream()
            .select_key(lambda k, v: f"{k.key}@{k.window.start}")
            .map_values(str)
            .to("out")
        )
        (
            grouped.windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(5))
            .count()
            .to_stream()
            .select_key(lambda k, v: f"{k.key}@{k.window.start}/{k.window.end}")
            .map_values(lambda v: "null" if v is None else str(v))
            .to("out-session")
        )
        (
            grouped.windowed_by(SlidingWindows.of_time_difference_without_grace(5))
            .count()
            .to_stream()
            .select_key(lambda k, v: f"{k.key}@{k.window.start}")
            .map_values(str)
            .to("out-sliding")
        )
        b.table("t").group_by(lambda k, v: (v, v)).count().to_stream().map_values(str).to("out-table")
        return {"out": "string", "out-session": "string", "out-sliding": "string", "out-table": "string"}
    return None
