"""The docs cannot drift from the code: their Python samples run, and the Java name mapping is checked.

- Every ```python block of a page runs, in page order, in one namespace per page (later blocks use what
  earlier ones defined, as a reader would). Samples needing a broker are written so that constructing
  objects is enough; anything that needs a server is in ```bash blocks.
- docs/coming-from-java.md: each kappaflow name resolves to a real attribute, every public method of the
  mapped classes is listed, and the Java name is the camelCase of the kappaflow one unless the row's note
  explains why not.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
PAGES = sorted(p for p in DOCS.glob("*.md") if BLOCK.search(p.read_text()))
ROW = re.compile(r"^\| `([^`]+)`[^|]* \| `([^`]+)` \| (.*) \|$", re.MULTILINE)


def test_pages_with_samples_are_found():
    names = {p.name for p in PAGES}
    assert {"getting-started.md", "concepts.md", "coming-from-faust-quix.md", "operations.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_python_samples_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem.replace('-', '_')}"}
    for number, block in enumerate(BLOCK.findall(page.read_text()), 1):
        code = compile(block, f"{page.name}[python block {number}]", "exec")
        exec(code, namespace)


def _resolve(path: str) -> object:
    parts = path.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attr in parts[split:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(path)


def _camel(name: str) -> str:
    head, *rest = name.rstrip("_").split("_")
    return head + "".join(word.title() for word in rest)


def _rows() -> list[tuple[str, str, str]]:
    return ROW.findall((DOCS / "coming-from-java.md").read_text())


def test_every_kappaflow_name_on_the_java_page_exists():
    rows = _rows()
    assert len(rows) > 100
    missing = []
    for _java, ours, _note in rows:
        try:
            _resolve(ours)
        except (ImportError, AttributeError):
            missing.append(ours)
    assert not missing, f"names on docs/coming-from-java.md that kappaflow does not have: {missing}"


def test_java_names_are_the_camel_case_unless_explained():
    wrong = [
        (java, ours)
        for java, ours, note in _rows()
        if not note.strip() and java.split(".")[-1] != _camel(ours.split(".")[-1])
    ]
    assert not wrong, f"Java name is not the camelCase and no note says why: {wrong}"


def test_every_public_method_is_on_the_java_page():
    listed = {ours for _java, ours, _note in _rows()}
    classes = {ours.rsplit(".", 1)[0] for ours in listed}
    unlisted = []
    for path in sorted(classes):
        cls = _resolve(path)
        if not isinstance(cls, type):
            continue
        unlisted += [f"{path}.{m}" for m in dir(cls) if not m.startswith("_") and f"{path}.{m}" not in listed]
    assert not unlisted, f"public API missing from docs/coming-from-java.md: {unlisted}"


def test_every_exported_metric_family_is_in_the_operations_table() -> None:
    """The runtime's `# HELP` table (kappaflow.runner.http.HELP) and docs/operations.md's metric table
    name the same families: a metric added to the runtime must be documented."""
    from kappaflow.runner.http import HELP, _metric_name

    text = (DOCS / "operations.md").read_text()
    documented = set(re.findall(r"`(kappaflow_[a-z0-9_]+)`", text))
    for prefix, suffixes in re.findall(r"`(kappaflow_[a-z0-9_]+?)_get_total`((?:, `_[a-z]+_total`)+)", text):
        documented |= {prefix + s for s in re.findall(r"`(_[a-z]+_total)`", suffixes)}
    missing = []
    for raw in HELP:
        name = _metric_name(raw)
        if name not in documented and name + "_total" not in documented:
            missing.append(name)
    assert not missing, f"exported but not in docs/operations.md: {missing}"
