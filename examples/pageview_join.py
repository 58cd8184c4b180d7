"""Page-view enrichment: the join example. Three joins that Kafka Streams users know:

- page views (stream, key user id) joined with the `users` table -> views carrying the user's region
  (stream-table left join: every view is emitted, with region "unknown" when the user is not known yet);
- page views joined with `clicks` (stream-stream inner join, 5 minutes apart at most, both directions)
  -> `view-clicks`, one record per (view, click) pair, at the later of the two timestamps;
- region counts of enriched views, per region (repartitioned by region), to `views-per-region`.

    kappaflow describe examples.pageview_join:build_topology
"""

from __future__ import annotations

from typing import Any

from kappaflow import JoinWindows, Materialized, StreamsBuilder, Topology, serdes

VIEWS = "pageviews"
USERS = "users"
CLICKS = "clicks"
ENRICHED = "pageviews-enriched"
VIEW_CLICKS = "view-clicks"
PER_REGION = "views-per-region"
JOIN_WINDOW_MS = 5 * 60_000


def enrich(view: dict[str, Any], user: dict[str, Any] | None) -> dict[str, Any]:
    return {**view, "region": user["region"] if user else "unknown"}


def pair(view: dict[str, Any], click: dict[str, Any]) -> dict[str, Any]:
    return {"page": view["page"], "clicked": click["target"]}


def build_topology() -> Topology:
    builder = StreamsBuilder()
    json, string = serdes.Json(), serdes.String()
    views = builder.stream(VIEWS, key_serde=string, value_serde=json)
    users = builder.table(USERS, key_serde=string, value_serde=json, materialized=Materialized.as_("users"))
    clicks = builder.stream(CLICKS, key_serde=string, value_serde=json)

    enriched = views.left_join(users, enrich)
    enriched.to(ENRICHED, key_serde=string, value_serde=json)

    views.join(
        clicks,
        pair,
        JoinWindows.of_time_difference_and_grace(JOIN_WINDOW_MS, 0),
        name="view-click",
        value_serde=json,
        other_value_serde=json,
    ).to(VIEW_CLICKS, key_serde=string, value_serde=json)

    (
        enriched.group_by(lambda _user, view: view["region"], key_serde=string, value_serde=json)
        .count(Materialized.as_("region-counts").with_value_serde(serdes.Long()))
        .to_stream()
        .to(PER_REGION, key_serde=string, value_serde=serdes.Long())
    )
    return builder.build()
