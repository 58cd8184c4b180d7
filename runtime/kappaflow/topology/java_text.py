"""The text of Java's `Topology.describe()`, section by section (issue 27, item 8).

Why a module of its own: the layout is Java's `InternalTopologyBuilder` rules, not kappaflow's -
sub-topologies and global stores share one numbering, in the order of the first node each got; nodes
are listed by the size of the sub-tree below them, then by name; each node's neighbours are listed in
the order of a `TreeSet` filled while those sizes were still growing (see `java_order`). A
stream-global join's processor does not list the global store: Java reads it through a value getter,
never connects it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kappaflow.topology.java_order import JavaTreeSet, hash_order, java_set_string
from kappaflow.topology.nodes import (
    GlobalStoreSpec,
    NodeSpec,
    ProcessorSpec,
    SinkSpec,
    SourceSpec,
    SubTopology,
)

if TYPE_CHECKING:
    from kappaflow.topology.topology import Topology


def _node_head(node: NodeSpec, hidden: set[str]) -> str:
    if isinstance(node, SourceSpec):
        return f"Source: {node.name} (topics: {java_set_string(node.topics)})"
    if isinstance(node, ProcessorSpec):
        stores = [s for s in node.stores if s not in hidden]
        return f"Processor: {node.name} (stores: {java_set_string(stores)})"
    topic = node.topic if isinstance(node.topic, str) else "<dynamic>"
    return f"Sink: {node.name} (topic: {topic})"


def _names(names: list[str]) -> str:
    return ", ".join(names) if names else "none"


class _Neighbours:
    """Sub-tree sizes and neighbour sets of one sub-topology, connected in Java's order."""

    def __init__(self, nodes: list[NodeSpec]) -> None:
        self.size = {node.name: 1 for node in nodes}
        self.successors = {node.name: JavaTreeSet(self.compare) for node in nodes}
        self.predecessors = {node.name: JavaTreeSet(self.compare) for node in nodes}
        by_name = {node.name: node for node in nodes}
        # Java's describeSubtopology walks a HashMap of the group's nodes (itself copied from a HashSet)
        for name in hash_order(by_name):
            for parent in by_name[name].parents:
                self.predecessors[name].add(parent)
                self.successors[parent].add(name)
                self._grow(parent, self.size[name])

    def compare(self, a: str, b: str) -> int:
        """Java's NodeComparator: larger sub-tree first, then by name; reads the sizes as they are now."""
        if a == b:
            return 0
        if self.size[a] != self.size[b]:
            return self.size[b] - self.size[a]
        return -1 if a < b else 1

    def _grow(self, name: str, delta: int) -> None:
        self.size[name] += delta
        for parent in self.predecessors[name].items():
            self._grow(parent, delta)

    def ordered(self, names: list[str]) -> list[str]:
        """The sub-topology's own node order: by final size, then name (a consistent sort)."""
        return sorted(names, key=lambda n: (-self.size[n], n))


def _subtopology_text(sub_id: int, sub: SubTopology, hidden: set[str]) -> str:
    neighbours = _Neighbours(sub.nodes)
    by_name = {node.name: node for node in sub.nodes}
    lines = [f"Sub-topology: {sub_id}"]
    for name in neighbours.ordered(list(by_name)):
        node = by_name[name]
        lines.append("    " + _node_head(node, hidden))
        if not isinstance(node, SinkSpec):
            lines.append(f"      --> {_names(neighbours.successors[name].items())}")
        if not isinstance(node, SourceSpec):
            lines.append(f"      <-- {_names(neighbours.predecessors[name].items())}")
    return "\n".join(lines) + "\n\n"


def _global_text(gid: int, spec: GlobalStoreSpec) -> str:
    source, processor = spec.source, spec.processor
    return (
        f"Sub-topology: {gid} for global store (will not generate tasks)\n"
        f"    Source: {source.name} (topics: [{source.topics[0]}])\n"
        f"      --> {processor.name}\n"
        f"    Processor: {processor.name} (stores: [{spec.store_name}])\n"
        f"      --> none\n"
        f"      <-- {source.name}\n"
    )


def java_ids(topology: Topology) -> tuple[dict[int, int], dict[str, int]]:
    """Java's ids: (sub-topology index -> id, global store -> id), numbered together by first node."""
    first = {name: index for index, name in enumerate(topology.nodes)}
    keyed: list[tuple[float, int, str, int | str]] = []
    for sub in topology.sub_topologies():
        keyed.append((min(first[n.name] for n in sub.nodes), 0, "sub", sub.id))
    for order, (store, spec) in enumerate(topology.global_stores.items()):
        keyed.append((spec.position - 0.5, order, "global", store))
    keyed.sort(key=lambda item: (item[0], item[1]))
    subs: dict[int, int] = {}
    globals_: dict[str, int] = {}
    for java_id, (_, _, kind, ref) in enumerate(keyed):
        if kind == "sub":
            assert isinstance(ref, int)
            subs[ref] = java_id
        else:
            globals_[str(ref)] = java_id
    return subs, globals_


def java_sections(topology: Topology) -> list[str]:
    """Each sub-topology's and global store's text, in Java's id order."""
    sub_ids, global_ids = java_ids(topology)
    # global stores are read through value getters, never connected in Java; private stores Java lacks
    hidden = set(topology.global_stores) | topology.undescribed_stores()
    sections: list[tuple[int, str]] = []
    for sub in topology.sub_topologies():
        sections.append((sub_ids[sub.id], _subtopology_text(sub_ids[sub.id], sub, hidden)))
    for store, spec in topology.global_stores.items():
        sections.append((global_ids[store], _global_text(global_ids[store], spec)))
    return [text for _, text in sorted(sections)]
