"""`split()`'s result, `BranchedKStream`, and `Branched`: how each branch is named and what becomes of it.

Naming follows Java's `BranchedKStreamImpl` because internal topic names are built from node names: the
splitter is named by `split(name)` or `KSTREAM-BRANCH-<n>`; a branch is `<splitter><branch name>`, or
`<splitter><index>` when unnamed (1, 2, ... in order, 0 for the default branch); and every branch uses
up one generated-name number, as Java's does, so the nodes after a `split()` are numbered alike.

Branches make their streams through the builder's stream factory, so this module does not import
`dsl.kstream` (which imports it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from kappaflow.api.errors import TopologyError
from kappaflow.dsl.stream_processors import BranchProcessor, PassThroughProcessor

if TYPE_CHECKING:
    from kappaflow.dsl.kstream import KStream

K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True)
class Branched(Generic[K, V]):
    """Java's `Branched`: a branch's name and, optionally, what to do with its stream.

    `with_function(chain)` puts `chain(branch)`'s result in the returned dict in place of the branch (left
    out when it returns None); `with_consumer(chain)` hands the branch to `chain` and leaves it out."""

    name: str | None = None
    chain_function: Callable[[KStream[K, V]], KStream[Any, Any] | None] | None = None
    chain_consumer: Callable[[KStream[K, V]], None] | None = None

    @staticmethod
    def as_(name: str) -> Branched[Any, Any]:
        """A branch named `name` (its node and dict key: the splitter's name + `name`)."""
        return Branched(name=name)

    @staticmethod
    def with_function(
        chain: Callable[[KStream[Any, Any]], KStream[Any, Any] | None], name: str | None = None
    ) -> Branched[Any, Any]:
        """A branch whose stream is given to `chain`; its result takes the branch's place in the dict."""
        if not callable(chain):
            raise TopologyError(f"Branched.with_function: chain must be callable, got {chain!r}")
        return Branched(name=name, chain_function=chain)

    @staticmethod
    def with_consumer(
        chain: Callable[[KStream[Any, Any]], None], name: str | None = None
    ) -> Branched[Any, Any]:
        """A branch whose stream is handed to `chain` and left out of the dict."""
        if not callable(chain):
            raise TopologyError(f"Branched.with_consumer: chain must be callable, got {chain!r}")
        return Branched(name=name, chain_consumer=chain)


class BranchedKStream(Generic[K, V]):
    """`split(name).branch(predicate, Branched...)...default_branch(...)` -> dict of streams, keyed by the
    branch's node name (Java's map keys)."""

    def __init__(self, parent: KStream[K, V], splitter: str) -> None:
        self._parent = parent
        self._splitter = splitter
        self._predicates: list[Callable[[K, V], bool]] = []
        self._children: list[str] = []
        self._default: list[str] = []
        self._result: dict[str, KStream[Any, Any]] = {}
        predicates, children, default = self._predicates, self._children, self._default
        parent._builder.topology.add_processor(
            splitter,
            lambda: BranchProcessor(predicates, children, default[0] if default else None),
            parent.node,
        )

    def _child(self, branched: Branched[K, V], index: int) -> str:
        full = self._splitter + (branched.name if branched.name is not None else str(index))
        if full in self._parent._builder.topology.nodes:
            raise TopologyError(f"split(): branch '{full}' is defined twice")
        builder = self._parent._builder
        builder.new_name(full)  # Java's newProcessorName(branchChildName): one name number per branch
        builder.topology.add_processor(full, PassThroughProcessor, self._splitter)
        stream: KStream[K, V] = builder.new_stream(
            full,
            self._parent.key_serde,
            self._parent.value_serde,
            repartition_required=self._parent.repartition_required,
        )
        if branched.chain_function is not None:
            chained = branched.chain_function(stream)
            if chained is not None:
                self._result[full] = chained
        elif branched.chain_consumer is not None:
            branched.chain_consumer(stream)
        else:
            self._result[full] = stream
        return full

    @staticmethod
    def _branched(branched: Branched[K, V] | None, name: str | None) -> Branched[K, V]:
        if branched is not None and name is not None:
            raise TopologyError("split(): give a branch either name= or a Branched, not both")
        return branched if branched is not None else Branched(name=name)

    def branch(
        self,
        predicate: Callable[[K, V], bool],
        branched: Branched[K, V] | None = None,
        *,
        name: str | None = None,
    ) -> BranchedKStream[K, V]:
        """Records `predicate` accepts (and no earlier branch took) go to this branch."""
        if self._default:
            raise TopologyError("split(): branch() after default_branch()")
        if not callable(predicate):
            raise TopologyError(f"split(): branch predicate must be callable, got {predicate!r}")
        self._predicates.append(predicate)
        self._children.append(self._child(self._branched(branched, name), len(self._predicates)))
        return self

    def default_branch(
        self, branched: Branched[K, V] | None = None, *, name: str | None = None
    ) -> dict[str, KStream[Any, Any]]:
        """The records no branch took go to this last branch; returns the branches by name."""
        self._default.append(self._child(self._branched(branched, name), 0))
        return dict(self._result)

    def no_default_branch(self) -> dict[str, KStream[Any, Any]]:
        """Ends the split without a default branch (records no branch took are dropped)."""
        return dict(self._result)
