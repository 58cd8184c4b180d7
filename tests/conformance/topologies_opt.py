"""The "opt-" topology families (issue 27 item 10: `topology.optimization` through
`StreamsBuilder.build(props)`): java/OptTopologies.java is their Java half. `topologies.build` passes the
scenario's "optimization" parameter to `build`, as the Java half does. Kept apart from topologies.py, like
topologies_nm.py, so the families other work adds do not collide with these."""

from __future__ import annotations

from kappaflow import Grouped, KStream, KTable, StreamsBuilder
from kappaflow.api.serdes import Long
from kappaflow.dsl.windows import JoinWindows
from tests.conformance.conventions import Outputs, Params, join


def optimized_families(b: StreamsBuilder, family: str, p: Params) -> Outputs | None:
    out: Outputs = {"out": "string"}
    if family == "opt_table_reuse":  # a named source table, read directly and joined by a stream
        table: KTable = b.table("in", materialized="store")
        table.to_stream().to("out")
        b.stream("left").join(table, join).to("out-join")
        out = {"out": "string", "out-join": "string"}
    elif family == "opt_table_reuse_unnamed":  # materialized by the join that reads it
        unnamed: KTable = b.table("in")  # before the stream, as the Java half
        b.stream("left").left_join(unnamed, join).to("out")
    elif family == "opt_merge_repartition":  # one key change, two unnamed aggregations
        keyed: KStream = b.stream("in").select_key(lambda k, v: v[:1])
        keyed.group_by_key().count().to_stream().to("out", value_serde=Long())
        keyed.group_by_key().reduce(lambda a, c: a + c).to_stream().to("out2")
        out = {"out": "long", "out2": "string"}
    elif family == "opt_merge_named":  # a filter between key change and grouping; named; keyed written
        keyed = b.stream("in").select_key(lambda k, v: v[:1])
        keyed.filter(lambda k, v: not v.endswith("x")).group_by_key().count("counts").to_stream().to(
            "out", value_serde=Long()
        )
        keyed.group_by_key(grouped=Grouped.as_("grouped")).reduce(
            lambda a, c: a + c, "concat"
        ).to_stream().to("out2")
        keyed.to("keyed")
        out = {"out": "long", "out2": "string", "keyed": "string"}
    elif family == "opt_single_repartition":
        b.stream("in").select_key(lambda k, v: v[:1]).group_by_key().count().to_stream().to(
            "out", value_serde=Long()
        )
        out = {"out": "long"}
    elif family == "opt_merge_join":  # a stream-table join and a count below one key change
        users: KTable = b.table("users", materialized="users")
        keyed = b.stream("in").select_key(lambda k, v: v[:1])
        keyed.join(users, join).to("out")
        keyed.group_by_key().count("counts").to_stream().to("out2", value_serde=Long())
        out = {"out": "string", "out2": "long"}
    elif family == "opt_merge_group_by":  # group_by's own key selection, counted and reduced
        grouped = b.stream("in").group_by(lambda k, v: v[:1])
        grouped.count().to_stream().to("out", value_serde=Long())
        grouped.reduce(lambda a, c: a + c).to_stream().to("out2")
        out = {"out": "long", "out2": "string"}
    elif family == "opt_merge_value_change":  # a map_values between: that grouping keeps its topic
        keyed = b.stream("in").select_key(lambda k, v: v[:1])
        keyed.map_values(str.upper).group_by_key().reduce(lambda a, c: a + c).to_stream().to("out")
        keyed.group_by_key().reduce(lambda a, c: c + a).to_stream().to("out2")
        out = {"out": "string", "out2": "string"}
    elif family == "opt_below_merge":  # two key changes merged, then two groupings of the merge
        merged = (
            b.stream("in")
            .select_key(lambda k, v: v[:1])
            .merge(b.stream("in2").select_key(lambda k, v: v[:1]))
        )
        merged.group_by_key().count().to_stream().to("out", value_serde=Long())
        merged.group_by_key().reduce(lambda a, c: a + c).to_stream().to("out2")
        out = {"out": "long", "out2": "string"}
    elif family == "opt_below_merge_filter":  # a key change merged with a plain stream; a filter below
        merged = b.stream("in").select_key(lambda k, v: v[:1]).merge(b.stream("in2"))
        merged.filter(lambda k, v: not v.endswith("x")).group_by_key().count("counts").to_stream().to(
            "out", value_serde=Long()
        )
        merged.group_by_key().reduce(lambda a, c: a + c).to_stream().to("out2")
        out = {"out": "long", "out2": "string"}
    elif family == "opt_below_merge_value_change":  # a map_values on one side: no merging
        merged = (
            b.stream("in")
            .select_key(lambda k, v: v[:1])
            .map_values(str.upper)
            .merge(b.stream("in2").select_key(lambda k, v: v[:1]))
        )
        merged.group_by_key().count().to_stream().to("out", value_serde=Long())
        merged.group_by_key().reduce(lambda a, c: a + c).to_stream().to("out2")
        out = {"out": "long", "out2": "string"}
    elif family == "opt_below_merge_shared":  # the key change also grouped apart from the merge
        keyed = b.stream("in").select_key(lambda k, v: v[:1])
        keyed.group_by_key().count().to_stream().to("out", value_serde=Long())
        keyed.merge(b.stream("in2")).group_by_key().reduce(lambda a, c: a + c).to_stream().to("out2")
        out = {"out": "long", "out2": "string"}
    elif family == "opt_self_join":
        stream: KStream = b.stream("in")
        windows = JoinWindows.of_time_difference_and_grace(p["difference"], p["grace"])
        if "after" in p:
            windows = windows.after(p["after"])
        stream.join(stream, join, windows).to("out")
    elif family == "opt_self_left_join":
        stream = b.stream("in")
        stream.left_join(stream, join, JoinWindows.of_time_difference_and_grace(10, 5)).to("out")
    else:
        return None
    return out
