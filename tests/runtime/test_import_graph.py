"""No import cycles: what the runtime and the operator import as they run forms no cycle.

The import-linter contract "No import cycles" (pyproject.toml) checks the same graph with the
annotation-only back references (`if TYPE_CHECKING:`) ignored pair by pair; ignoring a pair hides a real
import added between the same two modules later. Here the graph is built without those annotations, so
every import that runs - at module level or inside a function - counts.
"""

from __future__ import annotations

import grimp

PACKAGES = ("kappaflow", "kappaflow_operator")


def import_cycles(graph: grimp.ImportGraph) -> list[tuple[str, ...]]:
    """The cycles through each import, as chains from a module back to itself, each rotated to start at
    its smallest module so one cycle found from several of its imports is listed once."""
    cycles: set[tuple[str, ...]] = set()
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            back = graph.find_shortest_chain(importer=imported, imported=module)
            if back is not None:
                members = (module, *back[:-1])
                start = members.index(min(members))
                cycles.add((*members[start:], *members[:start], min(members)))
    return sorted(cycles)


def test_the_runtime_and_operator_import_graphs_have_no_cycle() -> None:
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True, cache_dir=None)
    assert len(graph.modules) > 100  # both packages found, not an empty graph
    assert import_cycles(graph) == []


def test_a_cycle_is_found_with_its_modules() -> None:
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True, cache_dir=None)
    graph.add_import(importer="kappaflow.dsl.options", imported="kappaflow.dsl.kstream")
    cycles = import_cycles(graph)
    assert cycles and all(cycle[0] == cycle[-1] for cycle in cycles)
    assert any({"kappaflow.dsl.options", "kappaflow.dsl.kstream"} <= set(cycle) for cycle in cycles)


def rust_module_cycles(sources: dict[str, str]) -> list[tuple[str, ...]]:
    """Cycles among the native core's modules (`use crate::<module>` in `<module>.rs`)."""
    import re

    uses = {module: set(re.findall(r"use crate::(\w+)", text)) - {module} for module, text in sources.items()}
    cycles: set[tuple[str, ...]] = set()

    def walk(path: tuple[str, ...]) -> None:
        for used in sorted(uses.get(path[-1], ())):
            if used == path[0]:
                start = path.index(min(path))
                cycles.add((*path[start:], *path[:start]))
            elif used not in path:
                walk((*path, used))

    for module in uses:
        walk((module,))
    return sorted(cycles)


def test_the_native_cores_modules_have_no_cycle() -> None:
    from pathlib import Path

    source_dir = Path(__file__).resolve().parents[2] / "runtime" / "native" / "src"
    sources = {path.stem: path.read_text() for path in source_dir.glob("*.rs")}
    assert {"drain", "stages", "aggregate", "failure"} <= set(sources)
    assert rust_module_cycles(sources) == []
    sources["failure"] += "\nuse crate::stages::Next;\n"  # the check sees a cycle when there is one
    assert rust_module_cycles(sources) == [("aggregate", "failure", "stages"), ("failure", "stages")]
