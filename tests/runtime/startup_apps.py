"""Applications with start-up mistakes, for tests/runtime/test_cli_startup_errors.py."""

from __future__ import annotations

from typing import Any

from kappaflow import StreamsBuilder, Topology


def raises_type_error() -> Topology:
    """A well-formed topology function with a bug inside: its TypeError is the user's to see."""
    builder = StreamsBuilder()
    partitions: Any = "3"
    builder.stream("in").to("out")
    return partitions + 1  # type: ignore[no-any-return]


def needs_an_argument(name: str) -> Topology:
    builder = StreamsBuilder()
    builder.stream(name).to("out")
    return builder.build()
