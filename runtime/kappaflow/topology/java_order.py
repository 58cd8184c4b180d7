"""The iteration orders of the Java collections Kafka Streams' `TopologyDescription` is printed from.

Why this exists: Java's `describe()` text is not ordered by any rule a reader would write down. Node names
and store names go through `HashSet`s and `HashMap`s (iteration by the bucket of `String.hashCode`), and
each node's neighbours go into a `TreeSet` whose comparator reads the nodes' sub-tree sizes while those
sizes are still growing, so the order of a neighbour list depends on the red-black tree's shape at the
time of each insertion. Printing the same text as Java (issue 27, item 8: byte-identical descriptions, so
users can diff a kappaflow app against its Java twin) means reproducing these three behaviours; they are
pure functions of the names and the insertion order, kept here apart from the description itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

_DEFAULT_CAPACITY = 16
_LOAD_FACTOR = 0.75


def java_string_hash(text: str) -> int:
    """`String.hashCode()`: s[0]*31^(n-1) + ... over UTF-16 code units, as a signed 32-bit int."""
    value = 0
    data = text.encode("utf-16-be")
    for index in range(0, len(data), 2):
        value = (31 * value + (data[index] << 8 | data[index + 1])) & 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def _spread(hash_code: int) -> int:
    """`HashMap.hash`: the high half folded into the low half."""
    unsigned = hash_code & 0xFFFFFFFF
    return unsigned ^ (unsigned >> 16)


def _grown_capacity(size: int, initial: int = _DEFAULT_CAPACITY) -> int:
    """The table size a `HashMap` has after `size` insertions (it doubles past 3/4 full)."""
    capacity = initial
    while size > capacity * _LOAD_FACTOR:
        capacity *= 2
    return capacity


def _copy_capacity(size: int) -> int:
    """The table size of `new HashSet<>(collection)`: room for the collection without a resize."""
    wanted = max(int(size / _LOAD_FACTOR) + 1, _DEFAULT_CAPACITY)
    capacity = 1
    while capacity < wanted:
        capacity *= 2
    return capacity


def hash_order(names: Iterable[str], *, copied: bool = False) -> list[str]:
    """The iteration order of a `HashSet<String>` (or `HashMap` keys) filled with `names` in this order:
    by bucket, then by insertion within a bucket (resizes keep that relative order). `copied` is
    `new HashSet<>(collection)`, which sizes its table once instead of growing it."""
    unique = list(dict.fromkeys(names))
    capacity = _copy_capacity(len(unique)) if copied else _grown_capacity(len(unique))
    position = {name: index for index, name in enumerate(unique)}
    return sorted(unique, key=lambda n: (_spread(java_string_hash(n)) & (capacity - 1), position[n]))


def java_set_string(names: Iterable[str]) -> str:
    """`AbstractCollection.toString()` of a copied `HashSet<String>`: `[a, b]`."""
    return "[" + ", ".join(hash_order(names, copied=True)) + "]"


@dataclass
class _Entry(Generic[T]):
    key: T
    parent: _Entry[T] | None = None
    left: _Entry[T] | None = None
    right: _Entry[T] | None = None
    red: bool = True


class JavaTreeSet(Generic[T]):
    """`java.util.TreeSet` with a comparator: the same red-black insertions and rotations as `TreeMap`, so
    the in-order result is Java's even when the comparator's answers change between insertions."""

    def __init__(self, compare: Callable[[T, T], int]) -> None:
        self._compare = compare
        self._root: _Entry[T] | None = None

    def add(self, key: T) -> None:
        node = self._root
        if node is None:
            self._root = _Entry(key, red=False)
            return
        while True:
            parent = node
            cmp = self._compare(key, node.key)
            if cmp == 0:
                return
            node = node.left if cmp < 0 else node.right
            if node is None:
                break
        entry = _Entry(key, parent)
        if cmp < 0:
            parent.left = entry
        else:
            parent.right = entry
        self._fix_after_insertion(entry)

    def __iter__(self) -> object:
        return iter(self.items())

    def items(self) -> list[T]:
        out: list[T] = []
        stack: list[_Entry[T]] = []
        node = self._root
        while stack or node is not None:
            while node is not None:
                stack.append(node)
                node = node.left
            node = stack.pop()
            out.append(node.key)
            node = node.right
        return out

    # --------------------------------------------------------------- TreeMap's balancing, step for step
    @staticmethod
    def _is_red(entry: _Entry[T] | None) -> bool:
        return entry is not None and entry.red

    def _rotate_left(self, p: _Entry[T]) -> None:
        r = p.right
        assert r is not None
        p.right = r.left
        if r.left is not None:
            r.left.parent = p
        r.parent = p.parent
        if p.parent is None:
            self._root = r
        elif p.parent.left is p:
            p.parent.left = r
        else:
            p.parent.right = r
        r.left = p
        p.parent = r

    def _rotate_right(self, p: _Entry[T]) -> None:
        left = p.left
        assert left is not None
        p.left = left.right
        if left.right is not None:
            left.right.parent = p
        left.parent = p.parent
        if p.parent is None:
            self._root = left
        elif p.parent.right is p:
            p.parent.right = left
        else:
            p.parent.left = left
        left.right = p
        p.parent = left

    def _fix_after_insertion(self, x: _Entry[T]) -> None:
        x.red = True
        while x is not self._root and x.parent is not None and x.parent.red:
            parent = x.parent
            grand = parent.parent
            assert grand is not None  # a red parent is never the root
            if parent is grand.left:
                uncle = grand.right
                if self._is_red(uncle):
                    assert uncle is not None
                    parent.red, uncle.red, grand.red = False, False, True
                    x = grand
                    continue
                if x is parent.right:
                    x = parent
                    self._rotate_left(x)
                assert x.parent is not None and x.parent.parent is not None
                x.parent.red = False
                x.parent.parent.red = True
                self._rotate_right(x.parent.parent)
            else:
                uncle = grand.left
                if self._is_red(uncle):
                    assert uncle is not None
                    parent.red, uncle.red, grand.red = False, False, True
                    x = grand
                    continue
                if x is parent.left:
                    x = parent
                    self._rotate_right(x)
                assert x.parent is not None and x.parent.parent is not None
                x.parent.red = False
                x.parent.parent.red = True
                self._rotate_left(x.parent.parent)
        assert self._root is not None
        self._root.red = False
