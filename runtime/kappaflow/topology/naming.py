"""KIP-1111, `ensure.explicit.internal.resource.naming`: which internal topics and stores carry a generated
name, and the refusal to build a topology that has any.

Why it matters: a generated name holds a number that shifts whenever an operation is added upstream, and
internal topic names are built from it, so an edited topology silently starts new, empty changelogs and
repartition topics. Kafka Streams (4.1+) can refuse such topologies at build time; this is the same rule
and the same message, decided from the topology alone (pure, no I/O).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from weakref import WeakKeyDictionary

from kappaflow.api.errors import TopologyError
from kappaflow.topology.topology import Topology
from kappaflow_contract.topics import changelog_short_name

# a generated name ends in (or embeds, for names derived from one) the builder's 10-digit number
_GENERATED = re.compile(r"-[0-9]{10}(-|$)")

CONFIG_KEY = "ensure.explicit.internal.resource.naming"
# A foreign-key join's subscription topics and store: Kafka Streams 4.3.1 never checks them (its
# `doJoinOnForeignKey` names them without registering them for the check), so a foreign-key join whose
# result is materialized is accepted there with generated subscription names; refusing it here would turn
# a topology that runs on Java into one that does not (fkkv-*-materialized in the conformance suite).
_UNCHECKED = "KTABLE-FK-JOIN-SUBSCRIPTION-"


@dataclass(frozen=True)
class UnnamedResources:
    """The internal resources a user did not name, each list in the order the topology added them."""

    changelog_topics: list[str]
    state_stores: list[str]
    repartition_topics: list[str]

    def __bool__(self) -> bool:
        return bool(self.changelog_topics or self.state_stores or self.repartition_topics)

    def message(self) -> str:
        """Java's wording, one line per kind of resource."""
        lines = []
        if self.changelog_topics:
            lines.append(
                f"Following changelog topic(s) has not been named: {', '.join(self.changelog_topics)}"
            )
        if self.state_stores:
            lines.append(f"Following state store(s) has not been named: {', '.join(self.state_stores)}")
        if self.repartition_topics:
            lines.append(
                f"Following repartition topic(s) has not been named: {', '.join(self.repartition_topics)}"
            )
        return "\n".join(lines)


# What a topology held before `topology.optimization` rewrote it: Java checks the names of the
# operations the user wrote, so a store, changelog or repartition topic an optimization then removes
# (a self-join's other store, a merged repartition topic, a reused source table's changelog) still counts.
_BEFORE_OPTIMIZATION: WeakKeyDictionary[Topology, UnnamedResources] = WeakKeyDictionary()


def freeze_before_optimization(topology: Topology) -> None:
    """Record the unnamed resources of `topology` as the user wrote it, before an optimization rewrites
    it (the first record wins: a second `build(props)` rewrites an already rewritten topology)."""
    if topology not in _BEFORE_OPTIMIZATION:
        _BEFORE_OPTIMIZATION[topology] = unnamed_internal_resources(topology)


def unnamed_internal_resources(topology: Topology) -> UnnamedResources:
    """The stores (global ones included; their changelogs) and repartition topics whose names were
    generated, in the order they were added (Java lists them so). An unnamed table's private store
    counts although kappaflow builds it quietly: Java refuses that table too (a later join would give
    it a generated changelog); so does an unmaterialized foreign-key join's result store, which Java
    names (and checks) without building it. Of an optimized topology, those of the topology before the
    rewrites."""
    frozen = _BEFORE_OPTIMIZATION.get(topology)
    if frozen is not None:
        return frozen
    unlogged_private = topology.undescribed_stores()
    logged = set(topology.changelog_topics()) | unlogged_private
    # global stores count too (their topic is their log: no changelog to list)
    stores = [n for n in topology.stores if _GENERATED.search(n) and not n.startswith(_UNCHECKED)]
    changelogs = [changelog_short_name(name) for name in stores if name in logged]
    unbuilt = [n for n in topology.unbuilt_store_names if n not in topology.stores and _GENERATED.search(n)]
    stores += unbuilt
    changelogs += [changelog_short_name(name) for name in unbuilt]
    repartitions = [
        name
        for name in topology.internal_topics
        if _GENERATED.search(name) and not name.startswith(_UNCHECKED)
    ]
    return UnnamedResources(changelogs, stores, repartitions)


def ensure_explicit_naming(topology: Topology) -> None:
    """Raise a `TopologyError` naming every generated internal topic and store, if there is one."""
    unnamed = unnamed_internal_resources(topology)
    if unnamed:
        raise TopologyError(
            f"{CONFIG_KEY} is true, but some internal resources have generated names (name them with "
            "Materialized.as_, Grouped.as_, Repartitioned.as_, Joined/StreamJoined names):\n"
            + unnamed.message()
        )
