"""Topic preparation, shared by the stream thread and Spark reprocessing: check that the source topics
exist, create or validate the internal (repartition, changelog) topics, check co-partitioning.

The internal topics' partition counts follow the topology's rules (a repartition topic takes the largest
count of the sub-topology feeding it, a changelog its task count): the topology's `describe()` names the
topics each count follows, and the contract's `resolve_partitions` - the operator's rule too - decides
it from the source topics' counts. `InternalTopicManager` does the I/O.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from kappaflow.api.config import StreamsConfig
from kappaflow.clients.admin import InternalTopicManager, TopicError, TopicPlan
from kappaflow.topology.topology import Topology
from kappaflow_contract.describe import TopologyDescription
from kappaflow_contract.topics import internal_topic_name, resolve_partitions


@dataclass(frozen=True)
class PreparedTopics:
    subscription: list[str]  # every source topic of the stream tasks, internal ones resolved
    partition_counts: dict[str, int]  # user and internal topics
    repartition_topics: frozenset[str]


def prepare_topics(topology: Topology, config: StreamsConfig, admin: InternalTopicManager) -> PreparedTopics:
    app = config.application_id
    # read back through the schema the operator reads: what runs here is what the operator plans
    described = TopologyDescription.model_validate(topology.describe().to_dict())
    user_sources = [
        t for s in topology.sub_topologies() for t in s.source_topics if t not in topology.internal_topics
    ] + [g.source.topics[0] for g in topology.global_stores.values()]
    user_counts = admin.require_topics(user_sources)
    resolved, missing = resolve_partitions(described.internal_topics, app, user_counts)
    if missing:  # require_topics found every user source: only an unresolvable description gets here
        raise TopicError(f"cannot size internal topics, their partition counts follow: {', '.join(missing)}")
    plans = [
        TopicPlan(internal_topic_name(app, t.name), t.type, resolved[t.name], dict(t.config))
        for t in described.internal_topics
    ]
    wanted = {p.name: p.partitions for p in plans}
    admin.ensure(
        plans,
        wanted,
        config.get_bool("kappaflow.internal.topics.create"),
        config.get_int("replication.factor"),
    )
    counts = {**user_counts, **wanted}
    groups = [[topology.resolve_topic(t, app) for t in g] for g in topology.copartition_groups]
    admin.check_copartitioned(groups, counts)
    subscription = sorted(
        {topology.resolve_topic(t, app) for s in topology.sub_topologies() for t in s.source_topics}
    )
    return PreparedTopics(subscription, counts, frozenset(p.name for p in plans if p.kind == "repartition"))


class RepartitionPurger:
    """Deletes repartition records below the committed offsets, every `interval_s` (Kafka Streams'
    `repartition.purge.interval.ms`): repartition topics are the application's own and hold only what
    is still unprocessed."""

    def __init__(
        self,
        admin: InternalTopicManager,
        repartition_topics: frozenset[str],
        interval_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._admin = admin
        self._topics = repartition_topics
        self._interval_s = interval_s
        self._clock = clock
        self._last = clock()
        self._purgeable: dict[tuple[str, int], int] = {}

    def committed(self, offsets: dict[tuple[str, int], int]) -> None:
        """Offsets were committed: purge below them when the interval has passed."""
        self._purgeable.update((tp, o) for tp, o in offsets.items() if tp[0] in self._topics)
        if self._purgeable and self._clock() - self._last >= self._interval_s:
            self._last = self._clock()
            self._admin.purge(self._purgeable)
            self._purgeable = {}
