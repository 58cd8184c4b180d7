"""The `kappaflow` command line: `describe` a topology (text, Mermaid or JSON for the operator).

Applications are named `module:attr`, where attr is a Topology or a zero-argument function returning
one, so the same string works for `kappaflow describe`, `kappaflow run` and the operator's StreamApp.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Any

from kappaflow.api.errors import StreamsError
from kappaflow.topology.topology import Topology


def load_topology(target: str) -> Topology:
    """Import `module:attr` and return its Topology (calling attr if it is a function)."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise StreamsError(f"application must be 'module:attr', got '{target}'")
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise StreamsError(f"cannot import module '{module_name}': {exc}") from exc
    try:
        found: Any = getattr(module, attr)
    except AttributeError as exc:
        raise StreamsError(f"module '{module_name}' has no attribute '{attr}'") from exc
    if callable(found) and not isinstance(found, Topology):
        try:
            found = found()
        except TypeError as exc:
            raise StreamsError(f"'{target}' must be a Topology or take no arguments: {exc}") from exc
    if hasattr(found, "build") and not isinstance(found, Topology):
        found = found.build()
    if not isinstance(found, Topology):
        raise StreamsError(f"'{target}' is not a Topology (got {type(found).__name__})")
    return found


def _describe(args: argparse.Namespace) -> int:
    topology = load_topology(args.app)
    description = topology.describe()
    if args.format == "json":
        print(description.to_json())
    elif args.format == "mermaid":
        print(description.to_mermaid())
    else:
        print(description)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kappaflow", description="Kafka Streams for Python")
    commands = parser.add_subparsers(dest="command", required=True)
    describe = commands.add_parser("describe", help="print a topology's sub-topologies, nodes and stores")
    describe.add_argument("app", help="module:attr naming a Topology or a function returning one")
    group = describe.add_mutually_exclusive_group()
    group.add_argument("--json", dest="format", action="store_const", const="json", help="JSON for tools")
    group.add_argument(
        "--mermaid", dest="format", action="store_const", const="mermaid", help="Mermaid graph"
    )
    describe.set_defaults(func=_describe, format="text")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except StreamsError as exc:
        print(f"kappaflow: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
