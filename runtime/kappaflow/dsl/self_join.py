"""KIP-862, `single.store.self.join`: an inner stream-stream join of a stream with itself, rewritten to
keep one window store and one join processor, as Java's `InternalStreamsBuilder.rewriteSingleStoreSelfJoin`
and `KStreamKStreamSelfJoin` do.

A join is a self-join when both of its sides are the same node (Java: the join graph node has a single
parent); sides repartitioned separately are two nodes, and stay a two-store join. The rewrite keeps the
this-side `KSTREAM-WINDOWED` node and its store, drops the other-side windowed node, both join processors
and the other store, and turns the merge node into the self-join processor reading the kept store. Java
does this for left and outer self-joins too (every record matches itself, so none is ever unmatched) and
drops their outer-join store; so does this.

Recorded by `dsl.joins` when the join is compiled (`SelfJoinCandidate`), applied by `dsl.optimize`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kappaflow.api.processor import ProcessorContext
from kappaflow.api.record import Record
from kappaflow.dsl.stream_processors import drop_record
from kappaflow.dsl.windows import JoinWindows
from kappaflow.topology.nodes import ProcessorSpec
from kappaflow.topology.topology import Topology


@dataclass(frozen=True)
class SelfJoinCandidate:
    """A stream-stream join whose two sides are one node: the names the rewrite replaces and keeps."""

    this_windowed: str
    other_windowed: str
    this_join: str
    other_join: str
    merge: str
    this_store: str
    other_store: str
    outer_store: str | None
    windows: JoinWindows
    joiner: Callable[[Any, Any, Any], Any]  # (key, left, right), adapted from the user's


class KStreamKStreamSelfJoinProcessor:
    """Java's `KStreamKStreamSelfJoin`: the record (not stored yet: the windowed node forwards, then puts)
    joins the stored records of its key as the left side, then as the right side, and itself, in the
    order the two-store inner join emits them: the record with itself goes before the first result whose
    other record is later, or last; it is left out once the record is older than the store retains."""

    context: ProcessorContext

    def __init__(
        self, store: str, windows: JoinWindows, joiner: Callable[[Any, Any, Any], Any], label: str
    ) -> None:
        self.store_name = store
        self.before, self.after = windows.before_ms, windows.after_ms
        self.retention = windows.before_ms + windows.after_ms + windows.grace_ms  # Java: size + grace
        self.joiner = joiner
        self.label = label
        self.stream_time = -1

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.store = context.get_state_store(self.store_name)

    def process(self, record: Record[Any, Any]) -> None:
        key, value, ts = record.key, record.value, record.timestamp
        if key is None or value is None:
            drop_record(self.context, "null-key-or-value", self.label)
            return
        forward, joiner, headers = self.context.forward, self.joiner, record.headers
        self.stream_time = max(self.stream_time, ts)
        emit_self = ts > self.stream_time - self.retention + 1
        self_record = Record(key, joiner(key, value, value), ts, headers)
        for other_ts, other in list(self.store.fetch(key, max(0, ts - self.before), max(0, ts + self.after))):
            forward(Record(key, joiner(key, value, other), max(ts, other_ts), headers))
        emitted_self = False
        for other_ts, other in list(self.store.fetch(key, max(0, ts - self.after), max(0, ts + self.before))):
            if ts < other_ts and not emitted_self and emit_self:
                emitted_self = True
                forward(self_record)
            forward(Record(key, joiner(key, other, value), max(ts, other_ts), headers))
        if not emitted_self and emit_self:
            forward(self_record)

    def close(self) -> None:
        return None


def rewrite_self_join(topology: Topology, join: SelfJoinCandidate) -> None:
    """Replace the two-store join by the self-join over the this-side store (module docstring)."""
    nodes = topology.nodes
    if join.merge not in nodes or join.other_windowed not in nodes:
        return  # rewritten by an earlier build(props)
    this_windowed = nodes[join.this_windowed]
    for name in (join.this_join, join.other_join, join.other_windowed):
        removed = nodes.pop(name)
        for parent in removed.parents:
            if parent in nodes:
                nodes[parent].children.remove(name)
    this_windowed.children.append(join.merge)
    merge = nodes[join.merge]
    store, windows, joiner, label = join.this_store, join.windows, join.joiner, join.merge
    nodes[join.merge] = ProcessorSpec(
        join.merge,
        lambda: KStreamKStreamSelfJoinProcessor(store, windows, joiner, label),
        [join.this_windowed],
        [join.this_store],
        merge.children,
    )
    for store_name in (join.other_store, join.outer_store):
        if store_name is not None:
            del topology.stores[store_name]
    topology.changed()
