"""`Topology.describe()`: the text Kafka Streams prints, a Mermaid graph, and JSON for the operator.

The JSON form is a contract with the operator: it lists the user's topics and every internal topic with
its config and where its partition count comes from, so topics can be created before any pod starts.
Its schema is `kappaflow_contract.describe` (the operator validates this output with it, and so does the
runtime before it creates its own topics); topic configs are written as strings, as the schema says.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from kappaflow.topology.java_text import java_sections
from kappaflow.topology.nodes import ProcessorSpec, SinkSpec, SourceSpec
from kappaflow_contract.describe import SCHEMA_VERSION

if TYPE_CHECKING:
    from kappaflow.topology.topology import Topology


def _strings(config: dict[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in config.items()}


class TopologyDescription:
    def __init__(self, topology: Topology) -> None:
        self.topology = topology

    def __str__(self) -> str:
        """Java's `TopologyDescription.toString()`: sub-topologies and global stores by their Java id, the
        first after `"Topologies:\\n "`, each sub-topology followed by a blank line (a global store not)."""
        parts = ["Topologies:\n "]
        for section in java_sections(self.topology):
            parts.append("  " + section)
        return "".join(parts)

    def to_mermaid(self) -> str:
        def node_id(name: str) -> str:
            return name.replace("-", "_")

        lines = ["flowchart TD"]
        for sub in self.topology.sub_topologies():
            lines.append(f'  subgraph sub{sub.id}["Sub-topology {sub.id}"]')
            for node in sub.nodes:
                shape = {"source": "[/{}/]", "processor": "[{}]", "sink": "[\\{}\\]"}[node.kind]
                lines.append(f"    {node_id(node.name)}" + shape.format(f'"{node.name}"'))
            lines.append("  end")
        for sub in self.topology.sub_topologies():
            for node in sub.nodes:
                for child in node.children:
                    lines.append(f"  {node_id(node.name)} --> {node_id(child)}")
                if isinstance(node, SourceSpec):
                    for topic in node.topics:
                        lines.append(f'  t_{node_id(topic)}(("{topic}")) --> {node_id(node.name)}')
                if isinstance(node, SinkSpec) and isinstance(node.topic, str):
                    lines.append(f'  {node_id(node.name)} --> t_{node_id(node.topic)}(("{node.topic}"))')
                if isinstance(node, ProcessorSpec):
                    for store in node.stores:
                        lines.append(f"  {node_id(node.name)} -.- s_{node_id(store)}[({store})]")
        return "\n".join(lines)

    # ----------------------------------------------------------------- JSON for the operator
    def _partitions_of_topic(
        self, topic: str, seen: frozenset[str] = frozenset()
    ) -> tuple[int | None, set[str]]:
        """(explicit count, user topics whose max count applies) for a topic's partition count."""
        internal = self.topology.internal_topics.get(topic)
        if internal is None:
            return None, {topic}
        if internal.partitions is not None:
            return internal.partitions, set()
        if topic in seen:
            return None, set()
        writers = [s for s in self.topology.sub_topologies() if topic in s.sink_topics]
        users: set[str] = set()
        for sub in writers:
            count, topics = self._partitions_of_subtopology(sub.source_topics, seen | {topic})
            if count is not None:
                return count, set()
            users |= topics
        return None, users

    def _partitions_of_subtopology(
        self, sources: list[str], seen: frozenset[str] = frozenset()
    ) -> tuple[int | None, set[str]]:
        users: set[str] = set()
        for topic in sources:
            count, topics = self._partitions_of_topic(topic, seen)
            if count is not None:
                return count, set()
            users |= topics
        return None, users

    def to_dict(self) -> dict[str, Any]:
        topology = self.topology
        subs = topology.sub_topologies()
        internal: list[dict[str, Any]] = []
        for name, spec in topology.internal_topics.items():
            count, users = self._partitions_of_topic(name)
            entry: dict[str, Any] = {"name": name, "type": spec.kind, "config": _strings(spec.config)}
            entry.update({"partitions": count} if count is not None else {"partitions_from": sorted(users)})
            internal.append(entry)
        for store, spec in topology.changelog_topics().items():
            sub = next((s for s in subs if store in s.stores), None)
            count, users = self._partitions_of_subtopology(sub.source_topics) if sub else (None, set())
            entry = {"name": spec.name, "type": "changelog", "config": _strings(spec.config), "store": store}
            entry.update({"partitions": count} if count is not None else {"partitions_from": sorted(users)})
            internal.append(entry)
        return {
            "schema_version": SCHEMA_VERSION,
            "sub_topologies": [
                {
                    "id": s.id,
                    "source_topics": s.source_topics,
                    "sink_topics": s.sink_topics,
                    "stores": s.stores,
                    "nodes": [n.name for n in s.nodes],
                }
                for s in subs
            ],
            "global_stores": [
                {"store": g.store_name, "topic": g.source.topics[0]} for g in topology.global_stores.values()
            ],
            "source_topics": topology.source_topics(),
            "sink_topics": topology.sink_topics(),
            "internal_topics": internal,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)
