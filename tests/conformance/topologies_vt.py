"""The "vt-" topology families (issue 27 items 1-3: versioned tables downstream, versioned derived
tables, the latest version never expiring). Kept apart from topologies.py, like topologies_nm.py, so the
families other work adds do not collide with these."""

from __future__ import annotations

from kappaflow import KTable, Materialized, Stores, StreamsBuilder
from kappaflow.api.serdes import Long
from tests.conformance.conventions import Outputs, Params, join, starts_a


# ================================================================ vt- block (issue 27 items 1-3)
def versioned(name: str, p: Params) -> Materialized:
    """A versioned store with the scenario's history retention."""
    return Materialized.as_(Stores.persistent_versioned_key_value_store(name, p["history"]))


def versioned_families(b: StreamsBuilder, family: str, p: Params) -> Outputs | None:
    kind = p.get("kind", "inner")
    method = {"inner": "join", "left": "left_join", "outer": "outer_join"}[kind]
    out: Outputs = {"out": "string"}
    if family == "vt_group_count":
        counts = (
            b.table("in", materialized=versioned("store", p)).group_by(lambda k, v: (v, k)).count("counts")
        )
        counts.to_stream().to("out", value_serde=Long())
        out = {"out": "long"}
    elif family == "vt_group_aggregate":
        b.table("in", materialized=versioned("store", p)).group_by(lambda k, v: (k[:1], v)).aggregate(
            lambda: "", lambda k, v, agg: f"{agg}+{v}", lambda k, v, agg: f"{agg}-{v}", "agg"
        ).to_stream().to("out")
    elif family == "vt_table_join":
        left: KTable = b.table("left", materialized=versioned("left-store", p))
        right: KTable = b.table("right", materialized=versioned("right-store", p))
        getattr(left, method)(right, join).to_stream().to("out")
    elif family == "vt_filter":
        b.table("in", materialized=versioned("store", p)).filter(lambda k, v: starts_a(v)).to_stream().to(
            "out"
        )
    elif family == "vt_fk_join":
        table: KTable = b.table("left", materialized=versioned("left-store", p))
        other: KTable = b.table("right", materialized=versioned("right-store", p))

        def foreign_key(value: str) -> str | None:
            return value.split("|")[0] if "|" in value else None

        getattr(table, method)(other, foreign_key, join).to_stream().to("out")
    elif family == "vt_stream_join":
        right = b.table("right", materialized=versioned("right-store", p))
        b.stream("left").left_join(right, join).to("out")
    elif family == "vt_chain_group_count":
        source = b.table("in", materialized=versioned("store", p))
        if p["via"] == "filter":
            chained: KTable = source.filter(lambda k, v: v != "drop")
        else:
            chained = source.map_values(lambda v: v.upper(), "mapped")
        regrouped = chained.group_by(lambda k, v: (v, k)).count("counts")
        regrouped.to_stream().to("out", value_serde=Long())
        out = {"out": "long"}
    elif family == "vt_mixed_table_join":
        versioned_left: KTable = b.table("left", materialized=versioned("left-store", p))
        plain_right: KTable = b.table("right", materialized="right-store")
        getattr(versioned_left, method)(plain_right, join).to_stream().to("out")
    elif family == "vt_derived_join":
        derive = p["derive"]
        if derive == "to_table":
            derived: KTable = b.stream("right").to_table(versioned("derived", p))
        else:
            right = b.table("right", materialized=versioned("right-store", p))
            mat = versioned("derived", p) if p.get("materialized") else None
            if derive == "filter":
                derived = right.filter(lambda k, v: starts_a(v), mat)
            else:
                derived = right.map_values(lambda v: v.upper(), mat)
        b.stream("left").left_join(derived, join).to("out")
    else:
        return None
    return out


# ================================================================ end of the vt- block
