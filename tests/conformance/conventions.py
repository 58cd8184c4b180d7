"""What both halves of the conformance suite write alike (the module docstring of topologies.py): the
parameter and output-topic shapes, Java's string concatenation of a missing value, the joiner, a
predicate. Shared by the topology modules so none of them imports another."""

from __future__ import annotations

from typing import Any

Params = dict[str, Any]
Outputs = dict[str, str]


def s(value: object) -> str:
    """Java's ``"" + value``: None prints as ``null``."""
    return "null" if value is None else str(value)


def join(left: object, right: object) -> str:
    return f"{s(left)}+{s(right)}"


def starts_a(value: str | None) -> bool:
    return value is not None and value.startswith("a")
