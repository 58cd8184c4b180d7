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
build order writes them, so sub-topology numbering and `describe()` stay Java's.

Below a `merge()`: Java first files each repartition under a key change found by its parent search (which
at a merge node looks at the merge's parents), then hands the merge node the key changes above it whose
repartitions all lie below it, so the groupings of a merge of key-changed streams share one repartition
right below the merge node (`repartition_groups`). A value change on one side hides the key change on
that side from the search: then nothing below the merge is merged. A key change that is also grouped
apart from the merge keeps the merge's repartition in its own group, and the merge node itself moves
below the merged repartition (the other side's records then reach the grouping unrepartitioned): that is
what Java builds, and the conformance scenarios `opt-below-merge-*` pin it.
"""

from __future__ import annotations

from collections.abc import Callable

from kappaflow.api.errors import TopologyError
from kappaflow.dsl.graph import InternalBuilder, RepartitionHop
from kappaflow.dsl.stream_processors import NullKeyFilter
from kappaflow.topology.nodes import InternalTopicSpec, NodeSpec
from kappaflow.topology.topology import Topology

Predicate = Callable[[str], bool]


def find_parent_matching(nodes: dict[str, NodeSpec], start: str, test: Predicate) -> str | None:
    """Java's `InternalStreamsBuilder.findParentNodeMatching`, quirks included: `start` itself if it
    matches, else the first direct parent that matches, else the search above the *last* parent (an
    earlier parent's finding is overwritten). Which key change a repartition below a merge() belongs to,
    and which child of a key change moves, are decided by it, so its order is Java's."""
    if start not in nodes:
        return None
    if test(start):
        return start
    found = None
    for parent in nodes[start].parents:
        if parent in nodes and test(parent):
            return parent
        found = find_parent_matching(nodes, parent, test)
    return found


def child_of(nodes: dict[str, NodeSpec], parent: str) -> Predicate:
    """Java's `gn -> gn.parentNodes().contains(parent)`."""
    return lambda name: parent in nodes[name].parents


def repartition_groups(internal: InternalBuilder) -> dict[str, list[RepartitionHop]]:
    """Java's `keyChangingOperationsToOptimizableRepartitionNodes` after
    `maybeUpdateKeyChangingRepartitionNodeMap`: node -> the repartitions merged below it, in Java's order.

    A repartition belongs to the nearest key- or value-changing node above it when that is a key change
    (`getKeyChangingParentNode`; the hop's filter stands for Java's repartition node: its one parent is
    the hop's). Then each merge() node (in creation order) takes over the key changes above it whose
    repartitions all lie below it - a key change with none counts, as Java's `allMatch` of an empty set
    does - with their repartitions, in key-change creation order: those are merged below the merge()."""
    nodes = internal.topology.nodes
    order = {name: index for index, name in enumerate(nodes)}
    changers = sorted((n for n in internal.key_changing if n in nodes), key=order.__getitem__)
    groups: dict[str, list[RepartitionHop]] = {name: [] for name in changers}
    key_change: Predicate = internal.key_changing.__contains__

    def changing(name: str) -> bool:
        return name in internal.key_changing or name in internal.value_changing

    for hop in internal.optimizable_repartitions:
        if hop.source not in nodes:
            continue  # merged by an earlier build(props)
        nearest = find_parent_matching(nodes, hop.filter, changing)
        if nearest is not None and nearest == find_parent_matching(nodes, hop.filter, key_change):
            groups[nearest].append(hop)
    taken_over: dict[str, list[str]] = {}
    for merge in (m for m in internal.merge_nodes if m in nodes):

        def below_merge(hop: RepartitionHop, merge: str = merge) -> bool:
            return find_parent_matching(nodes, hop.filter, child_of(nodes, merge)) is not None

        taken_over[merge] = [
            changer
            for changer, hops in groups.items()
            if all(below_merge(hop) for hop in hops)
            and find_parent_matching(nodes, merge, child_of(nodes, changer)) is not None
        ]
    for merge, taken in taken_over.items():
        hops = [hop for changer in taken for hop in groups[changer]]
        groups.pop(merge, None)  # Java's put(): the merge node's entry goes last
        groups[merge] = list(dict.fromkeys(hops))
    for changer in {c for taken in taken_over.values() for c in taken}:
        del groups[changer]
    return groups


def merge_repartition_topics(internal: InternalBuilder) -> None:
    """Merge the repartitions below each key change, and below each merge() of key-changed streams
    (module docstring)."""
    topology = internal.topology
    nodes = topology.nodes
    merged = False
    for key_change, hops in repartition_groups(internal).items():
        hops = [hop for hop in hops if hop.source in nodes]  # a hop two merge() nodes both took
        if not hops:
            continue
        children = []
        for hop in hops:
            child = find_parent_matching(nodes, hop.filter, child_of(nodes, key_change))
            if child is None:
                raise TopologyError(f"repartition {hop.topic}: no child of {key_change} above it")
            children.append((hop, child))
        _merge(internal, key_change, children)
        merged = True
    if merged:
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
        parents = nodes[name].parents
        if key_change in parents:  # Java adds the merged repartition as a parent, then drops the old one
            parents.remove(key_change)
            parents.append(source)
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
