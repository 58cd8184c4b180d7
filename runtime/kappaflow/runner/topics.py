"""Topic preparation, shared by the stream thread and Spark reprocessing: check that the source topics
exist, that the output topics the topology names and the dead-letter topic exist (before joining the
group: a missing one used to surface only when its first records failed, tens of seconds in), create or
validate the internal (repartition, changelog) topics, check co-partitioning.

The internal topics' partition counts follow the topology's rules (a repartition topic takes the largest
count of the sub-topology feeding it, a changelog its task count): the topology's `describe()` names the
topics each count follows, and the contract's `resolve_partitions` - the operator's rule too - decides
it from the source topics' counts. `InternalTopicManager` does the I/O.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from kappaflow.api.config import StreamsConfig
from kappaflow.clients.admin import METADATA_SETTLE_S, InternalTopicManager, TopicError, TopicPlan
from kappaflow.topology.nodes import SinkSpec
from kappaflow.topology.topology import Topology
from kappaflow_contract.describe import TopologyDescription
from kappaflow_contract.topics import internal_topic_name, resolve_partitions

log = logging.getLogger(__name__)

DEAD_LETTER_TOPIC = "errors.dead.letter.queue.topic.name"


@dataclass(frozen=True)
class PreparedTopics:
    subscription: list[str]  # every source topic of the stream tasks, internal ones resolved
    partition_counts: dict[str, int]  # user and internal topics
    repartition_topics: frozenset[str]


def output_topics(topology: Topology) -> dict[str, list[str]]:
    """Each output topic the topology names -> the sink nodes writing to it. A sink with a
    TopicNameExtractor picks its topic per record: it cannot be checked ahead and is left out."""
    result: dict[str, list[str]] = {}
    for name, node in topology.nodes.items():
        if (
            isinstance(node, SinkSpec)
            and isinstance(node.topic, str)
            and node.topic not in topology.internal_topics
        ):
            result.setdefault(node.topic, []).append(name)
    return result


def missing_outputs(
    outputs: Mapping[str, list[str]], dead_letter: str, existing: Collection[str]
) -> list[str]:
    """One phrase per topic records would be written to that does not exist, naming what writes it."""
    problems = [
        f"output topic '{topic}' (sink {', '.join(sorted(nodes))})"
        for topic, nodes in sorted(outputs.items())
        if topic not in existing
    ]
    if dead_letter and dead_letter not in existing:
        problems.append(f"dead-letter topic '{dead_letter}' (config '{DEAD_LETTER_TOPIC}')")
    return problems


def check_outputs(admin: InternalTopicManager, outputs: Mapping[str, list[str]], dead_letter: str) -> None:
    """Refuse to start when a topic records go to is missing and the broker will not create it on the
    first write (`auto.create.topics.enable=false`, Kafka's production setting); when it would, or when
    its setting cannot be read, say so once and go on."""
    wanted = sorted({*outputs, *([dead_letter] if dead_letter else [])})
    if not wanted:
        return
    problems = missing_outputs(outputs, dead_letter, admin.partition_counts(wanted, METADATA_SETTLE_S))
    if not problems:
        return
    creates = admin.broker_creates_topics()
    listed, it = "; ".join(problems), "it" if len(problems) == 1 else "them"
    exists = "does not exist" if len(problems) == 1 else "do not exist"
    if creates is False:
        raise TopicError(
            f"{listed}: {exists} and the broker does not create topics on first write "
            f"(auto.create.topics.enable=false); create {it} first (kappaflow topics create <topic> "
            "--partitions <n>) or change the setting"
        )
    log.warning(
        "%s: %s; %s", listed, exists,
        f"the broker creates {it} on the first write, with its default partitions and settings"
        if creates else f"unless the broker creates {it} on the first write, producing to {it} will fail",
    )  # fmt: skip


def prepare_topics(
    topology: Topology,
    config: StreamsConfig,
    admin: InternalTopicManager,
    outputs: Mapping[str, list[str]] | None = None,
) -> PreparedTopics:
    """`outputs`: the output topics records will be written to, each with the sinks writing it (default:
    the topology's own; reprocessing passes its renamed ones, or none when it writes no outputs)."""
    app = config.application_id
    # read back through the schema the operator reads: what runs here is what the operator plans
    described = TopologyDescription.model_validate(topology.describe().to_dict())
    user_sources = [
        t for s in topology.sub_topologies() for t in s.source_topics if t not in topology.internal_topics
    ] + [g.source.topics[0] for g in topology.global_stores.values()]
    user_counts = admin.require_topics(user_sources)
    check_outputs(
        admin, output_topics(topology) if outputs is None else outputs, config.get_str(DEAD_LETTER_TOPIC)
    )
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
