"""``unirl diff A B``: one recipe on two backends, side by side.

Each recipe field with the native key and value it becomes on each side; the backend's own default
for that key where the two backends' defaults differ (what a hand-written port would silently get);
what one backend supports and the other refuses; and the capabilities that differ.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from unirl.backend.auto import resolve
from unirl.backend.contract import translate
from unirl.backend.plan import MappedField
from unirl.errors import RecipeInvalid, UnirlError
from unirl.recipe.fields import value_at
from unirl.recipe.schema import Recipe


@dataclass
class Side:
    framework: str
    version: str | None
    rows: list[MappedField]
    refused: list[str] = field(default_factory=list)
    """Problems the backend has with this recipe (field, value, what it supports)."""
    command: list[str] = field(default_factory=list)


def translate_side(host: Any, recipe: Recipe, name: str) -> Side:
    """The backend's plan, or (when it refuses the recipe) its mapping rows and every refusal."""
    framework = host.frameworks.get(name)
    recipe_for = _with_framework(recipe, name, framework.options)
    try:
        plan = framework.plan(recipe_for)
        rows = [*plan.mapping, *_model_row(plan.mapping, plan.native_config)]
        return Side(name, plan.target_version or plan.framework_version, rows, command=plan.command)
    except RecipeInvalid as exc:
        version = framework.capabilities.tested_version or "0"
        rows, _, _ = translate(resolve(recipe_for, framework).recipe, framework.mapping, name, version)
        return Side(name, version, rows, refused=[str(p) for p in exc.problems])


def _model_row(rows: list[MappedField], native: dict[str, Any]) -> list[MappedField]:
    """A backend whose mapping has no ``model.path`` row but whose native configuration names the model (TRL's
    ``native_config["model"]``, loaded by unirl's own runner) still shows it, instead of a "-" on that row."""
    model = native.get("model")
    if any(r.recipe_field == "model.path" for r in rows) or not isinstance(model, dict) or "path" not in model:
        return []
    return [MappedField("model.path", "model.path", model["path"], "loaded by the backend's runner (native_config)")]


def _with_framework(recipe: Recipe, name: str, options: dict[str, Any]) -> Recipe:
    """The recipe with this backend's own options (native overrides belong to one backend, so none carry over)."""
    from dataclasses import replace

    return replace(recipe, framework={**options, "name": name})


def diff(host: Any, recipe: Recipe, left: str, right: str) -> dict[str, Any]:
    a, b = translate_side(host, recipe, left), translate_side(host, recipe, right)
    fields: list[str] = []
    for row in [*a.rows, *b.rows]:
        if row.recipe_field not in fields:
            fields.append(row.recipe_field)
    table = []
    for name in fields:
        ra = [r for r in a.rows if r.recipe_field == name]
        rb = [r for r in b.rows if r.recipe_field == name]
        defaults_a = {r.native_key: r.native_default for r in ra}
        defaults_b = {r.native_key: r.native_default for r in rb}
        # compared only where both backends have defaults of their own: null is "unset" (the backend derives the
        # value or requires it), not a default that differs
        both_set = bool(ra and rb) and _all_set(defaults_a) and _all_set(defaults_b)
        table.append({
            "recipe_field": name,
            "value": _recipe_value(recipe, name),
            left: [{"key": r.native_key, "value": r.value, "default": r.native_default, "note": r.note} for r in ra],
            right: [{"key": r.native_key, "value": r.value, "default": r.native_default, "note": r.note} for r in rb],
            "only_in": left if ra and not rb else right if rb and not ra else None,
            "defaults_differ": both_set and _normalised(defaults_a) != _normalised(defaults_b),
            "default_unset": bool(ra and rb) and not both_set,
        })
    caps_a, caps_b = asdict(host.frameworks.get(left).capabilities), asdict(host.frameworks.get(right).capabilities)
    capabilities = {k: {left: caps_a[k], right: caps_b[k]} for k in caps_a if caps_a[k] != caps_b.get(k)}
    return {"left": asdict(a), "right": asdict(b), "fields": table, "capabilities": capabilities}


def _all_set(defaults: dict[str, Any]) -> bool:
    return all(v is not None for v in defaults.values())


def _normalised(defaults: dict[str, Any]) -> list[str]:
    return sorted(str(v) for v in defaults.values())


def _recipe_value(recipe: Recipe, dotted: str) -> Any:
    if dotted.startswith("framework.overrides.") or dotted == "rewards":
        return None
    value = value_at(recipe, dotted)
    return value if isinstance(value, str | int | float | bool | type(None)) else str(value)


DIFFER, UNSET = "*", "?"
LEGEND = {DIFFER: "the two backends' own defaults differ here (unirl sends its value to both unless a note says "
                  "\"not sent\")",
          UNSET: "a backend has no default of its own here (unset: it derives the value or requires it), so the "
                 "defaults are not compared"}


def print_diff(result: dict[str, Any]) -> None:
    """The table a researcher reads, whole: no cell is cut (folded in a terminal, one long line when piped), the
    marks are explained under it, and each key's note (what it counts: prompts or completions, updates or steps)
    follows, as in ``--json``."""
    from rich.table import Table

    from unirl.console import console

    left, right = result["left"]["framework"], result["right"]["framework"]
    out = console()

    def cell(entries: list[dict[str, Any]]) -> str:
        if not entries:
            return "-"
        return "\n".join(f"{e['key']}={_text(e['value'])}" for e in entries)

    def default_cell(entries: list[dict[str, Any]]) -> str:
        return "\n".join("unset" if e["default"] is None else _text(e["default"]) for e in entries) or "-"

    refusals = [(result[side]["framework"], problem)
                for side in ("left", "right") for problem in result[side]["refused"]]
    for framework, problem in refusals:  # first: what makes the comparison one of a recipe a backend cannot run
        out.print(f"{framework} refuses: {problem}", markup=False, highlight=False)
    if refusals:
        out.print("(the table below shows what each backend's mapping would send; a refused side does not run)")
    table = Table(title=f"one recipe: {left} vs {right}")
    for header in ("recipe field", "recipe value", f"{left} key = value", f"{left} default", f"{right} key = value",
                   f"{right} default"):
        table.add_column(header, overflow="fold")  # a terminal folds a long key; nothing is cut to "…"
    marks: set[str] = set()
    for row in result["fields"]:
        mark = DIFFER if row["defaults_differ"] else UNSET if row.get("default_unset") else ""
        marks.add(mark)
        table.add_row(row["recipe_field"] + (f" {mark}" if mark else ""), _text(row["value"]), cell(row[left]),
                      default_cell(row[left]), cell(row[right]), default_cell(row[right]))
    if not out.is_terminal:  # piped into grep or a file: each row on one line, however long
        from rich.measure import Measurement

        out.width = max(out.width, Measurement.get(out, out.options.update_width(1 << 20), table).maximum)
    out.print(table)
    for mark in (DIFFER, UNSET):
        if mark in marks:
            out.print(f"{mark} {LEGEND[mark]}")
    for key, values in result["capabilities"].items():
        out.print(f"capability {key}: {left}={_text(values[left])} | {right}={_text(values[right])}")
    notes = [(row["recipe_field"], side, e["key"], e["note"]) for row in result["fields"] for side in (left, right)
             for e in row[side] if e["note"]]
    if notes:
        out.print("\nwhat each key counts (the mappings' notes):")
        for field, side, key, note in notes:
            out.print(f"  {field} -> {side} {key}: {note}", soft_wrap=not out.is_terminal)


def _text(value: Any) -> str:
    import json

    return value if isinstance(value, str) else json.dumps(value, default=str)


def check_names(host: Any, names: list[str]) -> None:
    if len(names) != 2:
        raise UnirlError("usage: unirl diff FRAMEWORK_A FRAMEWORK_B [--json] [OVERRIDE ...]")
    for name in names:
        host.frameworks.entry(name)
