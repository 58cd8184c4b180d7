"""`merge.repartition.topics`: the repartitions that follow one key-changing operation share one topic,
as Java's `InternalStreamsBuilder.mergeRepartitionTopics` makes them.

Java groups its optimizable repartitions (groupings, joins, `to_table`; not `repartition()`) by the
key-changing operation above them (`map`, `flat_map`, `select_key`, `group_by`'s key selection, `process`),
when no value-changing operation (`map_values`, `flat_map_values`, `process_values`) lies between, and
replaces each group, even of one, by a single repartition right below the key change: its topic is the
first one's, its nodes are named `<topic>-filter`, `<topic>-sink` and `<topic>-source`. A node between
the key change and a repartition (a `filter`) moves below the merged repartition, and the records it
passes reach the operation that followed its old repartition directly.

Rewriting the compiled topology, the merged nodes are placed right after the key change, where Java's
build order writes them, so sub-topology numbering and `describe()` stay Java's. Not done here (Java does
it): repartitions below a `merge()` of streams, which Java groups by the merge node; they stay as built.
"""

from __future__ import annotations

from kappaflow.dsl.graph import InternalBuilder, RepartitionHop
from kappaflow.dsl.stream_processors import NullKeyFilter
from kappaflow.topology.nodes import InternalTopicSpec, NodeSpec
from kappaflow.topology.topology import Topology


def key_changer(internal: InternalBuilder, hop: RepartitionHop) -> tuple[str, str] | None:
    """(the key-changing node above `hop`, its child on the way down), or None when the nearest
    key- or value-changing node above is not a key change, or the way up forks (a merge)."""
    nodes, child, name = internal.topology.nodes, hop.filter, hop.parent
    while True:
        if name in internal.key_changing:
            return name, child
        if name in internal.value_changing or name not in nodes:
            return None
        parents = nodes[name].parents
        if len(parents) != 1:
            return None
        child, name = name, parents[0]


def merge_repartition_topics(internal: InternalBuilder) -> None:
    """Merge the repartitions below each key change (module docstring)."""
    topology = internal.topology
    groups: dict[str, list[tuple[RepartitionHop, str]]] = {}
    for hop in internal.optimizable_repartitions:
        if hop.source not in topology.nodes:
            continue  # merged by an earlier build(props)
        found = key_changer(internal, hop)
        if found is not None:
            groups.setdefault(found[0], []).append((hop, found[1]))
    for key_change, hops in groups.items():
        _merge(internal, key_change, hops)
    if groups:
        topology.changed()


def _merge(internal: InternalBuilder, key_change: str, hops: list[tuple[RepartitionHop, str]]) -> None:
    topology = internal.topology
    nodes = topology.nodes
    first = hops[0][0]
    topic, spec = first.topic, topology.internal_topics[first.topic]
    key_serde = next((h.key_serde for h, _ in hops if h.key_serde is not None), None)
    value_serde = next((h.value_serde for h, _ in hops if h.value_serde is not None), None)
    for prefix in ("KSTREAM-SINK-", "KSTREAM-FILTER-", "KSTREAM-SOURCE-"):
        internal.new_name(prefix)  # Java's createRepartitionedSource uses up the numbers all the same
    sink, filter_name, source = f"{topic}-sink", f"{topic}-filter", f"{topic}-source"
    below: list[str] = []  # the merged source's children
    moved: dict[str, list[str]] = {}  # node -> children it gains from a removed repartition
    for hop, child in hops:
        downstream = list(nodes[hop.source].children)
        if child == hop.filter:  # the repartition hangs off the key change itself
            below.extend(downstream)
        else:  # `child` moves below the merged repartition; the operation after `hop` below hop.parent
            nodes[key_change].children.remove(child)
            below.append(child)
            moved.setdefault(hop.parent, []).extend(downstream)
        for name in downstream:
            _replace_parent(nodes[name], hop.source, hop.parent if child != hop.filter else source)
        nodes[hop.source].children.clear()
        topology.remove_nodes(hop.filter, hop.sink, hop.source)
        del topology.internal_topics[hop.topic]
        for group in topology.copartition_groups:
            if hop.topic in group:
                group.discard(hop.topic)
                group.add(topic)
    topology.add_internal_topic(InternalTopicSpec(topic, spec.kind, spec.partitions, dict(spec.config)))
    topology.add_processor(filter_name, lambda: NullKeyFilter(filter_name, enabled=True), key_change)
    topology.add_sink(sink, topic, filter_name, key_serde=key_serde, value_serde=value_serde)
    topology.add_source(source, topic, key_serde=key_serde, value_serde=value_serde)
    for name in below:
        if child_of_key_change(nodes[name], key_change):
            _replace_parent(nodes[name], key_change, source)
    nodes[source].children.extend(below)
    for parent, children in moved.items():
        nodes[parent].children.extend(children)
    _place_after(topology, key_change, [filter_name, sink, source])
    key_children = nodes[key_change].children
    key_children.remove(filter_name)
    key_children.insert(0, filter_name)  # written right after the key change in Java's build order
    order = {name: index for index, name in enumerate(nodes)}
    for name in [source, *moved]:
        nodes[name].children.sort(key=order.__getitem__)


def child_of_key_change(node: NodeSpec, key_change: str) -> bool:
    return key_change in node.parents


def _replace_parent(node: NodeSpec, old: str, new: str) -> None:
    parents = node.parents
    parents[parents.index(old)] = new


def _place_after(topology: Topology, anchor: str, names: list[str]) -> None:
    """Reorder `topology.nodes` so `names` follow `anchor` (Java's build order: the merged repartition
    takes the key change's build priority)."""
    entries = list(topology.nodes.items())
    moving = {name: spec for name, spec in entries if name in names}
    rest = [(name, spec) for name, spec in entries if name not in moving]
    at = next(index for index, (name, _) in enumerate(rest) if name == anchor) + 1
    rest[at:at] = [(name, moving[name]) for name in names]
    topology.nodes.clear()
    topology.nodes.update(rest)
