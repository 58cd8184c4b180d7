"""Internal topics: their names and the rule for their partition counts, one function per fact.

Kafka Streams' naming: a repartition topic is `<application.id>-<name>-repartition`, a store's changelog
`<application.id>-<store>-changelog`. The topology knows the short names (`<name>-repartition`,
`<store>-changelog`); the application id is added when the app runs (or by the operator).

The partition rule: an internal topic has an explicit count, or takes the largest count among the topics
in its `partitions_from` (user topics, or other internal topics by short or full name). A count is
decided only when every topic it follows is known. The runtime applies it before it starts
(kappaflow.runner.topics) and the operator before it creates topics (kappaflow_operator.topics).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Protocol

CHANGELOG_SUFFIX = "-changelog"
REPARTITION_SUFFIX = "-repartition"
MIN_INSYNC_REPLICAS = "min.insync.replicas"
# With three or more replicas an acknowledged write (acks=all: every transactional and idempotent write)
# must be on two of them: one broker lost (crashed, frozen, restarting) keeps the topic writable and every
# acknowledged record on a surviving replica. The usual production setting (Kafka Streams' docs).
REPLICATED_MIN_INSYNC = 2
REPLICATED_FROM = 3


def internal_topic_name(application_id: str, short_name: str) -> str:
    """`<application.id>-<short name>`: the full name of an internal topic."""
    return f"{application_id}-{short_name}"


def changelog_short_name(store: str) -> str:
    """`<store>-changelog`, the changelog's name within the topology."""
    return f"{store}{CHANGELOG_SUFFIX}"


def changelog_topic(application_id: str, store: str) -> str:
    """`<application.id>-<store>-changelog`."""
    return internal_topic_name(application_id, changelog_short_name(store))


def is_changelog_topic(application_id: str, topic: str) -> bool:
    """Whether `topic` is one of the application's changelogs (the inverse of `changelog_topic`)."""
    return topic.startswith(f"{application_id}-") and topic.endswith(CHANGELOG_SUFFIX)


def repartition_short_name(name: str) -> str:
    """`<name>-repartition`, the repartition topic's name within the topology."""
    return f"{name}{REPARTITION_SUFFIX}"


# a foreign-key join's subscription and response topics (named as Java names them)
_FK_JOIN_TOPIC = re.compile(
    r".*(-subscription-(registration|response)-topic|-KTABLE-FK-JOIN-SUBSCRIPTION-(REGISTRATION|RESPONSE)-\d+-topic)"
)


def is_internal_topic_name(topic: str) -> bool:
    """True for a name shaped like an internal topic: a changelog, a repartition topic or a foreign-key
    join's subscription/response topic (Java's StreamsResetter rule, `matchesInternalTopicFormat`)."""
    return (
        topic.endswith((CHANGELOG_SUFFIX, REPARTITION_SUFFIX)) or _FK_JOIN_TOPIC.fullmatch(topic) is not None
    )


def replicated_topic_config(config: Mapping[str, str], replication_factor: int) -> dict[str, str]:
    """An internal topic's config for `replication_factor` replicas: `min.insync.replicas=2` from three
    replicas up, unless `config` sets it. Below three (one broker: the default -1 or 1) and when the
    broker picks the factor (-1, it is not known here) the broker's own default stays: requiring two
    in-sync replicas of two would stop writes whenever either broker is down. The runtime and the
    operator both create internal topics: both ask this."""
    result = dict(config)
    if replication_factor >= REPLICATED_FROM:
        result.setdefault(MIN_INSYNC_REPLICAS, str(REPLICATED_MIN_INSYNC))
    return result


class SizedTopic(Protocol):
    """What the partition rule reads of an internal topic (kappaflow_contract.describe.InternalTopic)."""

    @property
    def name(self) -> str: ...
    @property
    def partitions(self) -> int | None: ...
    @property
    def partitions_from(self) -> list[str]: ...


def resolve_partitions(
    topics: Iterable[SizedTopic], application_id: str, existing: Mapping[str, int]
) -> tuple[dict[str, int], list[str]]:
    """(partition count by short name, the user topics that are missing) for the internal `topics`.

    `existing` maps topic names to their partition counts. References between internal topics resolve
    to a fixpoint, so chains resolve in any order; a topic left unresolved (a cycle, or one that follows
    a missing topic) is absent from the counts, and when no user topic is missing it is reported as
    `<short name> (unresolvable partitions_from)`.
    """
    by_short = {t.name: t for t in topics}
    full_to_short = {internal_topic_name(application_id, s): s for s in by_short}
    resolved: dict[str, int] = {t.name: t.partitions for t in by_short.values() if t.partitions}
    missing: set[str] = set()
    changed = True
    while changed:
        changed = False
        for short, topic in by_short.items():
            if short in resolved:
                continue
            counts: list[int] = []
            complete = True
            for src in topic.partitions_from:
                internal = src if src in by_short else full_to_short.get(src)
                if internal is not None:
                    if internal in resolved:
                        counts.append(resolved[internal])
                    else:
                        complete = False
                elif src in existing:
                    counts.append(existing[src])
                else:
                    missing.add(src)
                    complete = False
            if complete and counts:
                resolved[short] = max(counts)
                changed = True
    for short in by_short:
        if short not in resolved and not missing:
            missing.add(f"{short} (unresolvable partitions_from)")
    return resolved, sorted(missing)
