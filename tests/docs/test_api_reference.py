"""Every public class, method, function and property the API reference pages render (`::: name` in
docs/api.md and docs/processor-api.md) has a docstring: an empty entry on the site is a test failure."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import griffe

ROOT = Path(__file__).resolve().parents[2]
PAGES = ("api.md", "processor-api.md")


def _rendered(obj: Any, seen: set[str], depth: int = 0) -> list[Any]:
    """`obj`'s public members as mkdocstrings shows them: classes, functions, properties (module
    attributes and plain instance attributes aside), two class levels deep."""
    found = []
    for name, member in obj.members.items():
        if name.startswith("_"):
            continue
        try:
            target = member.final_target if member.is_alias else member
        except griffe.AliasResolutionError:
            continue  # an import from outside kappaflow (`from __future__ import annotations`)
        kind = target.kind.value
        if kind not in ("class", "function", "attribute") or target.path in seen:
            continue
        if kind == "attribute" and (obj.kind.value == "module" or "property" not in target.labels):
            continue
        if obj.kind.value == "module" and target.parent is not None and target.parent.path != obj.path:
            continue  # a name the module imports, documented where it is defined
        seen.add(target.path)
        found.append(target)
        if kind == "class" and depth < 1:
            found += _rendered(target, seen, depth + 1)
    return found


def test_every_rendered_public_member_has_a_docstring() -> None:
    loader = griffe.GriffeLoader(search_paths=[str(ROOT / "runtime")])
    package = loader.load("kappaflow")
    loader.resolve_aliases(implicit=False, external=False)
    members: list[Any] = []
    seen: set[str] = set()
    for page in PAGES:
        for path in re.findall(r"^::: ([\w.]+)", (ROOT / "docs" / page).read_text(), re.MULTILINE):
            obj = package
            for part in path.split(".")[1:]:
                obj = obj[part]
            obj = obj.final_target if obj.is_alias else obj
            if obj.kind.value == "class" and obj.path not in seen:
                seen.add(obj.path)
                members.append(obj)
            members += _rendered(obj, seen)
    assert len(members) > 150, len(members)  # the pages render what they should
    undocumented = [m.path for m in members if not m.docstring]
    assert not undocumented, f"{len(undocumented)} of {len(members)} lack docstrings: {undocumented}"
