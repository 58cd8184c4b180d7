"""The "fkkv_" topology families (issue 27, KIP-1104: a foreign-key extractor over the key and the value);
java/FkKvTopologies.java is their Java half. Kept apart from topologies.py, like topologies_nm.py and
topologies_vt.py, so the families other work adds do not collide with these.

`extract` picks the extractor both halves build alike:
- "key_or_value" (`from_key_and_value`, Java's BiFunction): the part of the value before "|", else the
  part of the key before ".", else no foreign key - a composite primary key carrying its parent's key;
- "key" (`from_key_and_value`): the part of the key before "." whatever the value, so only a tombstone
  (or a first row) changes what a row subscribes to;
- "value" (`from_value`, Java's Function): the part of the value before "|".
`history` makes both tables versioned with that history retention; `materialized` names the result store.
"""

from __future__ import annotations

from kappaflow import ForeignKeyExtractor, KTable, Materialized, Stores, StreamsBuilder
from tests.conformance.conventions import Outputs, Params, join


def _before(text: str, sep: str) -> str | None:
    return text.split(sep)[0] if sep in text else None


def key_or_value(key: str, value: str) -> str | None:
    return _before(value, "|") or _before(key, ".")


def key_only(key: str, value: str) -> str | None:
    return _before(key, ".")


def extractor(p: Params) -> ForeignKeyExtractor[str, str, str]:
    kind = p.get("extract", "key_or_value")
    if kind == "value":
        return ForeignKeyExtractor.from_value(lambda value: _before(value, "|"))
    return ForeignKeyExtractor.from_key_and_value(key_only if kind == "key" else key_or_value)


def _table(b: StreamsBuilder, topic: str, p: Params) -> KTable[str, str]:
    store = f"{topic}-store"
    if "history" in p:
        return b.table(
            topic,
            materialized=Materialized.as_(Stores.persistent_versioned_key_value_store(store, p["history"])),
        )
    return b.table(topic, materialized=store)


def fkkv_families(b: StreamsBuilder, family: str, p: Params) -> Outputs | None:
    if family != "fkkv_join":
        return None
    left, right = _table(b, "left", p), _table(b, "right", p)
    result = p.get("materialized")
    if p.get("kind", "inner") == "left":
        joined = left.left_join(right, extractor(p), join, result)
    else:
        joined = left.join(right, extractor(p), join, result)
    joined.to_stream().to("out")
    return {"out": "string"}
