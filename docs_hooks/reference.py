"""MkDocs hook: pages that must not drift from the code are generated while the site builds.

`<!-- streamapp-reference -->` in a page becomes the StreamApp field reference, rendered from the pydantic
models in kappaflow_operator.models (the same models the CRD is generated from), so a field added to the
models shows up in the docs on the next build with its type, default and docstring.
"""

from __future__ import annotations

from typing import Any

from kappaflow_operator.models import StreamAppSpec

MARKER = "<!-- streamapp-reference -->"


def _type(schema: dict[str, Any], defs: dict[str, Any]) -> str:
    if "$ref" in schema:
        return "object (" + schema["$ref"].rsplit("/", 1)[-1] + ")"
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{schema['const']}`"
    if "anyOf" in schema:
        options = [_type(s, defs) for s in schema["anyOf"] if s.get("type") != "null"]
        return " \\| ".join(options)
    kind = schema.get("type", "any")
    if kind == "array":
        return f"list of {_type(schema.get('items', {}), defs)}"
    if kind == "object" and "additionalProperties" in schema:
        return f"map of {_type(schema['additionalProperties'] or {}, defs)}"
    return str(kind)


def _rows(schema: dict[str, Any], defs: dict[str, Any], prefix: str, seen: set[str]) -> list[str]:
    rows = []
    required = set(schema.get("required", []))
    for name, prop in schema.get("properties", {}).items():
        path = f"{prefix}{name}"
        target = prop
        if "$ref" not in prop:
            refs = [s for s in prop.get("anyOf", []) if "$ref" in s]
            target = refs[0] if refs else prop
        default = prop.get("default")
        shown = "required" if name in required else ("" if default in (None, {}, []) else f"`{default}`")
        text = " ".join((prop.get("description") or "").split()).replace("|", "\\|")
        rows.append(f"| `{path}` | {_type(prop, defs)} | {shown} | {text} |")
        if "$ref" in target:
            ref = target["$ref"].rsplit("/", 1)[-1]
            if ref not in seen:
                rows += _rows(defs[ref], defs, path + ".", seen | {ref})
    return rows


def streamapp_reference() -> str:
    schema = StreamAppSpec.model_json_schema(by_alias=True)
    defs = schema.get("$defs", {})
    header = ["| field (`spec.`) | type | default | meaning |", "| --- | --- | --- | --- |"]
    return "\n".join(header + _rows(schema, defs, "", set()))


def on_page_markdown(markdown: str, **_: Any) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, streamapp_reference())
    return markdown
