"""Internal-topic planning: from `kappaflow describe` output and observed partition counts to a plan.

Pure: the kopf layer (kafka.py) lists the topics, calls `plan_internal_topics`, creates `plan.to_create`
with the admin client, and puts `plan.mismatches` into a Degraded condition. Kafka Streams semantics:
a topic's partition count comes from its inputs, an existing topic with another count is an error, and
the operator never resizes (adding partitions to a changelog or repartition topic silently moves keys
away from the state that holds them). The names and the partition rule are the runtime's own, from the
contract both import (`kappaflow_contract.topics`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kappaflow_contract.topics import internal_topic_name, resolve_partitions

from .models import InternalTopicStatus, TopologyDescription


@dataclass(frozen=True)
class TopicSpec:
    """An internal topic as it must exist."""

    name: str
    """Full name, `<application.id>-<short name>`."""
    type: str
    partitions: int
    config: dict[str, str]


@dataclass(frozen=True)
class TopicMismatch:
    name: str
    type: str
    expected_partitions: int
    actual_partitions: int

    @property
    def message(self) -> str:
        return (
            f"topic {self.name} has {self.actual_partitions} partitions but the topology needs "
            f"{self.expected_partitions}; the operator never resizes internal topics and deploys nothing "
            f"while they mismatch: delete {self.name} (the operator recreates it with "
            f"{self.expected_partitions} partitions; its {self.type} data is lost), or set a new "
            "spec.applicationId to start on fresh internal topics"
        )


@dataclass(frozen=True)
class TopicPlan:
    """The outcome of planning: what to create, what is fine, what is wrong, what is unknown."""

    to_create: list[TopicSpec] = field(default_factory=list)
    existing: list[TopicSpec] = field(default_factory=list)
    mismatches: list[TopicMismatch] = field(default_factory=list)
    missing_sources: list[str] = field(default_factory=list)
    """User topics the topology reads that do not exist yet (their partition counts are unknown)."""
    max_parallelism: int | None = None
    """Largest partition count among any sub-topology's input topics: more replicas than this idle."""

    @property
    def ready(self) -> bool:
        """True when every internal topic can be created or exists with the right partition count."""
        return not self.mismatches and not self.missing_sources

    def problems(self) -> list[str]:
        msgs = [m.message for m in self.mismatches]
        if self.missing_sources:
            msgs.append("waiting for source topics to exist: " + ", ".join(self.missing_sources))
        return msgs

    def status(self, created: frozenset[str] = frozenset()) -> list[InternalTopicStatus]:
        """The status.internalTopics entries; `created` names topics created in this pass."""
        out: list[InternalTopicStatus] = []
        for spec in self.existing:
            out.append(_topic_status(spec, "Ready", spec.partitions))
        for spec in self.to_create:
            state = "Created" if spec.name in created else "Missing"
            out.append(_topic_status(spec, state, spec.partitions if spec.name in created else None))
        for m in self.mismatches:
            wrong = TopicSpec(m.name, m.type, m.expected_partitions, {})
            out.append(_topic_status(wrong, "Mismatch", m.actual_partitions))
        return sorted(out, key=lambda s: s.name)


def _topic_status(spec: TopicSpec, state: str, actual: int | None) -> InternalTopicStatus:
    return InternalTopicStatus.model_validate(
        {
            "name": spec.name,
            "type": spec.type,
            "partitions": spec.partitions,
            "actualPartitions": actual,
            "state": state,
        }
    )


def plan_internal_topics(
    description: TopologyDescription, application_id: str, existing: Mapping[str, int]
) -> TopicPlan:
    """Plan the internal topics of `description` for `application_id`.

    `existing` maps topic names to partition counts for every topic the operator found; it must cover
    the user's source topics and the internal topics (the kopf layer lists all topics once).
    """
    resolved, missing = resolve_partitions(description.internal_topics, application_id, existing)
    plan = TopicPlan(missing_sources=missing)
    for topic in sorted(description.internal_topics, key=lambda t: t.name):
        if topic.name not in resolved:
            continue
        spec = TopicSpec(
            name=internal_topic_name(application_id, topic.name),
            type=topic.type,
            partitions=resolved[topic.name],
            config=dict(topic.config),
        )
        actual = existing.get(spec.name)
        if actual is None:
            plan.to_create.append(spec)
        elif actual != spec.partitions:
            plan.mismatches.append(TopicMismatch(spec.name, spec.type, spec.partitions, actual))
        else:
            plan.existing.append(spec)
    return TopicPlan(
        to_create=plan.to_create,
        existing=plan.existing,
        mismatches=plan.mismatches,
        missing_sources=plan.missing_sources,
        max_parallelism=_max_parallelism(description, application_id, existing, resolved),
    )


def _max_parallelism(
    description: TopologyDescription,
    application_id: str,
    existing: Mapping[str, int],
    resolved: Mapping[str, int],
) -> int | None:
    """Largest partition count over all topics any sub-topology consumes (user or repartition).

    Each consumer in the group gets partitions of every subscribed topic, so the member count that can
    receive work is bounded by the widest input topic; replicas past it would sit idle.
    """
    counts: list[int] = []
    inputs = {s for st in description.sub_topologies for s in st.source_topics} | set(
        description.source_topics
    )
    by_full_name = {internal_topic_name(application_id, short): n for short, n in resolved.items()}
    for topic in inputs:
        if topic in existing:
            counts.append(existing[topic])
        elif topic in resolved:
            counts.append(resolved[topic])
        elif topic in by_full_name:
            counts.append(by_full_name[topic])
    return max(counts) if counts else None


def internal_topic_names(description: TopologyDescription, application_id: str) -> list[str]:
    """Full names of all internal topics: what `topicCleanupPolicy: Delete` deletes."""
    return sorted(internal_topic_name(application_id, t.name) for t in description.internal_topics)
