"""``unirl explain FIELD``: one recipe field, from its own declaration and every installed backend's mapping table.

What the field means, its unit, the values it takes (range, choices) and its default; then, for each installed
backend, the native key(s) it becomes, the backend's own default for that key (what it would use if unirl sent
nothing) and what the backend accepts. A group (``unirl explain algorithm``) lists its fields. ``unirl plan --help``
lists every field from the same declarations (:func:`fields_help`).
"""

from __future__ import annotations

import argparse
import difflib
import json
import textwrap
from typing import Any

from unirl.backend.contract import NO_DEFAULT, Framework, Mapping
from unirl.errors import UnirlError
from unirl.recipe.fields import FieldInfo, normalise, number, schema_fields
from unirl.recipe.schema import Recipe

WIDTH = 118


def cmd_explain(args: list[str]) -> int:
    from unirl.host.manager import get_host

    parser = argparse.ArgumentParser(prog="unirl explain", description="What a recipe field means, the values it "
                                     "takes, and the native key each installed backend receives for it.")
    parser.add_argument("field", metavar="FIELD", help="a recipe field (algorithm.lr, rewards.0.weight) or a group "
                        "(algorithm)")
    parser.add_argument("--json", action="store_true", help="the same as JSON")
    ns = parser.parse_args(args)
    result = explain(get_host(), ns.field)
    print(json.dumps(result, indent=2, default=str) if ns.json else render(result))
    return 0


def explain(host: Any, dotted: str) -> dict[str, Any]:
    """The field (or every field of the group) named ``dotted``, with each installed backend's rows for it."""
    wanted = normalise(dotted)
    fields = list(schema_fields(Recipe))
    exact = [f for f in fields if f.name == wanted]
    if exact:
        result = {"field": describe(exact[0], host), "backends": backend_rows(host, wanted)}
        if exact[0].doc is not None and exact[0].doc.auto:
            result["auto"] = auto_on_each(host, wanted)
        return result
    group = [f for f in fields if f.name.startswith(f"{wanted}.") or f.name.startswith(f"{wanted}[].")]
    if group:
        return {"group": wanted, "fields": [describe(f, host) for f in group]}
    close = difflib.get_close_matches(wanted, [f.name for f in fields], n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else ""
    raise UnirlError(f"{dotted}: no such recipe field{hint} (`unirl plan --help` lists every field)")


def describe(info: FieldInfo, host: Any | None) -> dict[str, Any]:
    """The field's declaration as data; choices from a host registry when the field names one (and a host is given)."""
    doc = info.doc
    choices: list[str] = []
    if doc is not None and doc.choices_from:
        registry = getattr(host, doc.choices_from, None)
        choices = list(registry.names()) if registry is not None else []
    elif doc is not None:
        choices = list(doc.choices)
    return {
        "name": info.name, "type": info.type_text, "default": info.default, "help": doc.help if doc else "",
        "unit": doc.unit if doc else "", "allowed": allowed_text(info, choices), "choices": choices,
    }


def allowed_text(info: FieldInfo, choices: list[str]) -> str:
    doc = info.doc
    if doc is None:
        return ""
    parts = []
    registered = doc.choices_from.replace("_", " ")
    if choices:
        parts.append("one of " + ", ".join(choices) + (f" (the {registered} plugins registered)"
                                                        if doc.choices_from else ""))
    elif doc.choices_from:
        parts.append(f"one of the registered {registered} (`unirl plugins`)")
    if doc.range is not None:
        parts.append(doc.range.text() + (", or null" if info.optional else "") + (f" ({doc.why})" if doc.why else ""))
    if doc.typo_above is not None:
        parts.append(f"above {number(doc.typo_above)} is refused as a likely typo")
    if info.type_text == "float":
        parts.append("finite")
    if doc.auto:
        parts.append(f"or auto: {doc.auto}")
    return "; ".join(parts)


def backend_rows(host: Any, field_name: str) -> dict[str, list[dict[str, Any]]]:
    """Backend name -> the mapping rows of that backend for the field (an empty list: the backend gets no key)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for entry in host.frameworks:
        framework: Framework = host.frameworks.get(entry.name)
        out[entry.name] = [row(m) for m in framework.mapping if normalise(m.recipe_field) == field_name]
    return out


def auto_on_each(host: Any, field_name: str) -> dict[str, dict[str, Any]]:
    """Backend name -> what ``auto`` resolves to there for the default recipe on this machine, and why."""
    from unirl.backend.auto import resolve

    out: dict[str, dict[str, Any]] = {}
    for entry in host.frameworks:
        resolved = resolve(Recipe(), host.frameworks.get(entry.name)).values
        found = next((a for a in resolved if a.field == field_name), None)
        if found is not None:
            out[entry.name] = {"value": found.value, "why": found.why}
    return out


def row(m: Mapping) -> dict[str, Any]:
    accepts = ", ".join(str(v) for v in m.allowed)
    return {"key": m.native_key, "default": None if m.native_default is NO_DEFAULT else m.native_default,
            "default_known": m.native_default is not NO_DEFAULT, "note": m.note, "accepts": accepts,
            "only": m.supported_text if m.supported is not None or m.allowed else "", "versions": m.versions}


# --- text --------------------------------------------------------------------------------------------------------


def render(result: dict[str, Any]) -> str:
    if "group" in result:
        return "\n".join([f"{result['group']}: {len(result['fields'])} fields (unirl explain FIELD for one)", "",
                          *(_field_line(f) for f in result["fields"])])
    field, lines = result["field"], []
    lines.append(f"{field['name']}: {field['type']}, default {_show(field['default'])}")
    lines += _wrapped(field["help"], "  ")
    if field["unit"]:
        lines.append(f"  unit: {field['unit']}")
    if field["allowed"]:
        lines += _wrapped(f"allowed: {field['allowed']}", "  ")
    lines += ["", "  each installed backend (default: what the backend uses when unirl does not send the key):"]
    silent = [name for name, rows in result["backends"].items() if not rows]
    keyed = {name: rows for name, rows in result["backends"].items() if rows}
    width = max((len(name) for name in keyed), default=0)
    for name, rows in keyed.items():
        for i, r in enumerate(rows):
            default = _show(r["default"]) if r["default_known"] else "not documented"
            head = f"    {(name if i == 0 else ''):<{width}}  {r['key']}  (default {default})"
            lines.append(head + (f" [versions {r['versions']}]" if r["versions"] else ""))
            for text in (r["note"], f"accepts {r['only'] or r['accepts']}" if r["only"] or r["accepts"] else ""):
                if text:
                    lines += _wrapped(text, " " * (width + 8))
    if silent:
        lines += _wrapped(f"no native key on {', '.join(silent)}: unirl uses the field itself there, or the backend "
                          "has no such setting", "    ")
    if result.get("auto"):
        lines += ["", "  auto resolves to, for the default recipe on this machine (`unirl plan` shows it per run):"]
        for name, auto in result["auto"].items():
            lines += _wrapped(f"{name:<{width}}  {_show(auto['value'])}  ({auto['why']})", "    ")
    return "\n".join(lines)


def fields_help() -> str:
    """Every recipe field on a line or two, for ``unirl plan --help``: name, default, allowed values, unit, meaning."""
    lines = ["recipe fields (set as FIELD=VALUE; `unirl explain FIELD` adds each backend's native key and default):"]
    lines += [_field_line(describe(info, None)) for info in schema_fields(Recipe)]
    return "\n".join(lines)


def _field_line(field: dict[str, Any]) -> str:
    extra = "; ".join(x for x in (field["allowed"] or (", ".join(field["choices"]) if field["choices"] else ""),
                                  field["unit"]) if x)
    text = f"{field['name']} = {_show(field['default'])}" + (f"  [{extra}]" if extra else "") + f"  {field['help']}"
    return "\n".join(textwrap.wrap(text, WIDTH, initial_indent="  ", subsequent_indent="      "))


def _wrapped(text: str, indent: str) -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=indent + "  ") if text else []


def _show(value: Any) -> str:
    return json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
