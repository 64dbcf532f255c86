"""``unirl import``: a recipe from a backend's native configuration, by inverting the plugin's mapping table.

Each row of a backend's table (:class:`unirl.backend.contract.Mapping`) is inverted one of three ways:

* its own :attr:`~unirl.backend.contract.Mapping.inverse`, beside the row, where the native key is in other units
  (batch sizes in completions or prompts, warm-up in training steps, ...) or depends on other keys;
* generically, as a **rename**, when ``convert`` returns the field's value unchanged for probe values;
* generically, as a **lookup table**, when ``convert`` maps the field's few choices to distinct native values
  (loss-aggregation names, KL estimator names, booleans); the first choice wins where two give one native value.

The recipe so built is then planned, and every native key whose planned value differs from the imported one stays
native (``framework.overrides``), so planning the imported recipe reproduces the native configuration, except the
keys that are paths or unirl's own wiring (data files, the reward, checkpoints), which are reported as dropped.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from unirl.backend.contract import NO_DEFAULT, OMIT, Mapping
from unirl.backend.plan import RUN_DIR, LaunchPlan
from unirl.errors import FieldError, RecipeInvalid, UnirlError
from unirl.recipe.fields import FieldInfo, schema_fields, value_at
from unirl.recipe.schema import Recipe, recipe_from_dict, validate
from unirl.versions import matches

PLANNED = {"verl": "overrides", "openrlhf": "flags", "trl": "grpo_config"}
"""Where each backend's plan keeps the native key -> value dict that ``unirl import`` reads back."""
REWARD_FIELDS = ("rewards", "reward_policy")
NOT_DEFAULTED = ("data.train", "data.eval", "model.path", "model.dtype", "run.name", "seed", "rollout.engine")
"""Fields never taken from a backend default (its example paths and names; verl's dtype defaults are the recipe's
auto only when both are left out)."""
"""Rows for these fields are unirl's reward wiring: a native value for them is dropped (set ``rewards`` instead)."""
PROBES: dict[str, tuple[Any, ...]] = {"bool": (True, False), "int": (3, 7), "float": (0.3, 0.7),
                                      "str": ("probe-a", "probe-b")}


@dataclass
class ImportReport:
    """What became of each native key: a recipe field, a native override, or dropped (and why)."""

    mapped: list[tuple[str, str, Any]] = field(default_factory=list)
    """(native key, recipe field, recipe value)."""
    native: dict[str, Any] = field(default_factory=dict)
    """Kept as ``framework.overrides``: no recipe field expresses the value."""
    dropped: list[tuple[str, Any, str]] = field(default_factory=list)
    """(native key, value, why): paths and launcher details unirl sets itself."""
    unresolved: list[tuple[str, str]] = field(default_factory=list)
    """(native key, value) holding a shell ``$VAR`` reference, left as written."""
    reset: list[tuple[str, Any, str]] = field(default_factory=list)
    """(recipe field, imported value, why): refused by unirl or the backend, back to the default."""
    added: list[tuple[str, Any, Any]] = field(default_factory=list)
    """(native key, unirl's value, the backend's default): keys the input left at the default that unirl sets."""
    defaulted: list[tuple[str, str, Any]] = field(default_factory=list)
    """(native key, recipe field, value): fields taken from the backend's default for a key the input leaves out."""

    def text(self) -> str:
        lines = [f"mapped ({len(self.mapped)}):"]
        lines += [f"  {key} -> {name} = {value!r}" for key, name, value in self.mapped]
        lines.append(f"stayed native, in framework.overrides ({len(self.native)}):")
        lines += [f"  {key} = {value!r}" for key, value in self.native.items()]
        lines.append(f"dropped ({len(self.dropped)}):")
        lines += [f"  {key} = {value!r}: {why}" for key, value, why in self.dropped]
        if self.unresolved:
            lines.append(f"shell references left as written ({len(self.unresolved)}):")
            lines += [f"  {key} = {value}" for key, value in self.unresolved]
        if self.reset:
            lines.append(f"back to the recipe default ({len(self.reset)}):")
            lines += [f"  {name} = {value!r}: {why}" for name, value, why in self.reset]
        if self.defaulted:
            lines.append(f"from the backend's defaults, for keys the input leaves out ({len(self.defaulted)}):")
            lines += [f"  {key} -> {name} = {value!r}" for key, name, value in self.defaulted]
        if self.added:
            lines.append(f"set by unirl where the input kept the backend's default ({len(self.added)}):")
            lines += [f"  {key} = {value!r} (default {default!r})" for key, value, default in self.added]
        return "\n".join(lines)


@dataclass
class Imported:
    fields: dict[str, Any]
    """The recipe fields the native configuration set (dotted name -> value)."""
    recipe: Recipe
    """The whole recipe: the defaults, ``fields``, and ``framework`` (name and overrides)."""
    report: ImportReport

    def document(self) -> dict[str, Any]:
        """The recipe file's content: every field that differs from unirl's default, then the framework with its
        native overrides."""
        tree: dict[str, Any] = {}
        default = Recipe()
        for info in schema_fields(Recipe):
            if "[]" in info.name or info.name.startswith(("framework", "scheduler")):
                continue
            value = value_at(self.recipe, info.name)
            if value != value_at(default, info.name):
                set_in(tree, info.name, value)
        tree["framework"] = {"name": self.recipe.framework["name"]}
        if self.report.native:
            tree["framework"]["overrides"] = dict(self.report.native)
        return tree


def set_in(tree: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    for part in parents:
        tree = tree.setdefault(part, {})
    tree[leaf] = value


def with_value(obj: Any, dotted: str, value: Any) -> Any:
    """``obj`` (a recipe or one of its sections) with one dotted field replaced."""
    head, _, rest = dotted.partition(".")
    return dataclasses.replace(obj, **{head: with_value(getattr(obj, head), rest, value) if rest else value})


def same(a: Any, b: Any) -> bool:
    """Native values equal as the backend reads them: numbers by value (1 == 1.0), containers element-wise."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or (isinstance(a, bool) and isinstance(b, bool) and a == b)
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


def kind(info: FieldInfo) -> str:
    return next((k for k in ("bool", "int", "float", "str") if info.type_text.split(" | ")[0] == k), "")


def keys_of(row: Mapping) -> list[str]:
    """The native keys a row sets: one, or several joined by "/" (TRL's ``save_strategy/save_steps``)."""
    return [] if row.native_key.startswith("(") else row.native_key.split("/")


Inverter = Callable[[Any, "View"], dict[str, Any]]


def generic_inverse(row: Mapping, base: Recipe, info: FieldInfo | None) -> Inverter | None:
    """A rename or a lookup table, found by probing ``convert`` on ``base``; None when it is neither."""
    if info is None or not kind(info):
        return None
    name = row.recipe_field
    choices: tuple[Any, ...] = row.allowed or (info.doc.choices if info.doc else ()) or PROBES[kind(info)]

    def out(value: Any) -> Any:
        try:
            return row.convert(with_value(base, name, value))
        except Exception:  # a probe the row cannot convert: the row is not generic
            return OMIT

    if len(choices) < 2:
        return None  # one allowed value: nothing to tell apart (the base recipe already holds it)
    outputs = [out(c) for c in choices]
    if all(type(o) is type(c) and o == c for o, c in zip(outputs, choices, strict=True)):
        return lambda value, view: {name: value}
    if kind(info) == "bool" and outputs in ([True, OMIT], [OMIT, True]):  # a store_true switch: absent is off
        on = outputs[0] is True
        return lambda value, view: {name: bool(value) == on}
    table: dict[Any, Any] = {}
    for choice, native in zip(choices, outputs, strict=True):
        if native is not OMIT and isinstance(native, str | int | float | bool):
            table.setdefault((type(native), native), choice)
    if len(set(table.values())) < 2:
        return None

    def lookup(value: Any, view: View) -> dict[str, Any]:
        try:
            return {name: table[(type(value), value)]}
        except (KeyError, TypeError):
            raise ValueError(f"{value!r} is none of {sorted(str(k[1]) for k in table)}") from None
    return lookup


class View:
    """The native configuration and the recipe so far, as inverses read them (:class:`contract.NativeView`)."""

    def __init__(self, native: dict[str, Any], defaults: dict[str, Any], base: Recipe, fields: dict[str, Any]):
        self.native, self.defaults, self.base, self.fields = native, defaults, base, fields

    def get(self, key: str) -> Any:
        return self.native[key] if key in self.native else self.defaults.get(key)

    def field(self, dotted: str) -> Any:
        return self.fields[dotted] if dotted in self.fields else value_at(self.base, dotted)


def base_recipe(framework: Any, table: tuple[Mapping, ...]) -> Recipe:
    """The recipe an import starts from: unirl's defaults, the backend, every field the backend allows in one value
    only (verl's ``data.chat_template=true``, OpenRLHF's one rollout engine), and the plugin's ``import_base`` (what
    its native configuration cannot say otherwise: OpenRLHF never evaluates before training)."""
    recipe = Recipe(framework={"name": framework.name})
    for row in table:
        if len(row.allowed) == 1:
            recipe = with_value(recipe, row.recipe_field, row.allowed[0])
    engines = framework.capabilities.rollout_engines
    if len(engines) == 1:
        recipe = with_value(recipe, "rollout.engine", engines[0])
    for name, value in getattr(framework, "import_base", {}).items():
        recipe = with_value(recipe, name, value)
    return recipe


def build(base: Recipe, fields: dict[str, Any], overrides: dict[str, Any]) -> Recipe:
    tree = dataclasses.asdict(base)
    for dotted, value in fields.items():
        set_in(tree, dotted, value)
    tree["framework"] = {**tree["framework"], "overrides": dict(overrides)}
    return recipe_from_dict(tree)


def import_native(framework: Any, native: dict[str, Any], known_rewards: list[str],
                  dropped: dict[str, str] | None = None, given: dict[str, Any] | None = None) -> Imported:
    """Invert ``framework``'s mapping table over ``native`` (native key -> value) into a recipe (``known_rewards``:
    the host's, to validate it).

    ``dropped``: keys outside the mapping table that unirl sets itself (key -> why), beyond the plugin's own
    ``import_dropped``; ``given``: recipe fields the native configuration does not hold (TRL's GRPOConfig has no GPU
    count: ``resources.gpus_per_node``), set before the inversion reads them."""
    backend = framework.name
    version = framework.capabilities.tested_version
    table = tuple(m for m in framework.mapping if not m.versions or matches(version, m.versions))
    infos = {f.name: f for f in schema_fields(Recipe)}
    base = base_recipe(framework, table)
    report = ImportReport()
    defaults = {k: m.native_default for m in table for k in keys_of(m) if m.native_default is not NO_DEFAULT}
    dropped = {**getattr(framework, "import_dropped", {}), **(dropped or {})}
    for row in table:
        if row.recipe_field.startswith(REWARD_FIELDS):
            for key in keys_of(row):
                dropped.setdefault(key, "unirl's reward wiring: name the rewards in the recipe's `rewards`")

    fields: dict[str, Any] = dict(given or {})
    origin: dict[str, list[str]] = {}  # recipe field -> the native keys it came from
    # A key the input leaves out has the backend's default in the run it describes: invert that too (not for the
    # paths and names a default stands in for, and not for None: "derived from other keys").
    effective = {**{k: v for m in table if m.recipe_field not in NOT_DEFAULTED for k in keys_of(m)
                    if k in defaults and (v := defaults[k]) is not None and v != "???"}, **native}
    view = View(native, defaults, base, fields)
    explicit = [r for r in table if r.inverse is not None]
    generic = [(r, inv) for r in table if r.inverse is None and not r.recipe_field.startswith(REWARD_FIELDS)
               for inv in [generic_inverse(r, base, infos.get(r.recipe_field))] if inv is not None]
    failed: dict[str, str] = {}
    # renames and lookups first, then the explicit inverses twice (one may read a field another sets)
    for row, inverter in [*generic, *[(r, r.inverse) for r in explicit], *[(r, r.inverse) for r in explicit]]:
        keys = [k for k in keys_of(row) if k in effective]
        if not keys or inverter is None:
            continue
        value = effective[keys[0]] if len(keys_of(row)) == 1 else {k: effective[k] for k in keys}
        info = infos.get(row.recipe_field)
        if isinstance(value, str) and "$" in value and (info is None or kind(info) != "str"):
            continue  # a shell reference for a number stays native, as written
        if isinstance(value, str) and value.startswith(RUN_DIR):
            continue  # a path unirl itself sends (a plan read back): no recipe field in it
        try:
            found = inverter(value, view)
        except (ValueError, ZeroDivisionError, TypeError) as exc:
            failed[keys[0]] = str(exc)
            continue
        for name, v in found.items():
            fields[name] = v
            origin.setdefault(name, [])
            origin[name] += [k for k in keys if k not in origin[name]]
    for key, value in native.items():
        if isinstance(value, str) and "$" in value:
            report.unresolved.append((key, value))

    recipe, plan = settle(framework, known_rewards, base, fields, origin, report)
    planned = dict(plan.native_config[PLANNED.get(backend, "overrides")])
    overrides: dict[str, Any] = {}
    consumed = {k: name for name, keys in origin.items() for k in keys}
    row_field = {k: m.recipe_field for m in table for k in keys_of(m)}
    for key, value in native.items():
        mine = planned.get(key, OMIT)
        if key in dropped:
            report.dropped.append((key, value, dropped[key]))
        elif isinstance(mine, str) and mine.startswith(RUN_DIR) and key in consumed:
            report.mapped.append((key, consumed[key], fields.get(consumed[key])))
        elif isinstance(mine, str) and mine.startswith(RUN_DIR):
            report.dropped.append((key, value, f"a path unirl sets itself ({mine})"))
        elif mine is not OMIT and same(mine, value):
            if key in consumed:
                report.mapped.append((key, consumed[key], fields.get(consumed[key])))
            else:
                report.mapped.append((key, f"({row_field.get(key, 'launch')}: unirl sends the same)", value))
        else:
            overrides[key] = value
    if overrides:
        recipe = build(base, fields, overrides)
        plan = framework.plan(recipe)
        planned = dict(plan.native_config[PLANNED.get(backend, "overrides")])
    report.native = overrides
    for row in table:
        for key in keys_of(row):
            if key not in native and key in planned and key in defaults and not same(planned[key], defaults[key]):
                report.added.append((key, planned[key], defaults[key]))
    for name, keys in origin.items():
        for key in keys:
            if key not in native and name in fields:
                report.defaulted.append((key, name, fields[name]))
    for key, why in failed.items():
        if key in overrides:
            report.reset.append((key, native[key], f"kept native: {why}"))
    return Imported(fields, recipe, report)


def settle(framework: Any, known_rewards: list[str], base: Recipe, fields: dict[str, Any], origin: dict[str, list[str]],
           report: ImportReport) -> tuple[Recipe, LaunchPlan]:
    """Validate and plan the imported recipe; a field unirl or the backend refuses goes back to its default (its
    native keys then stay native) until the recipe plans."""
    from omegaconf.errors import OmegaConfBaseException

    for _ in range(len(fields) + 1):
        try:
            recipe = build(base, fields, {})
            validate(recipe, known_rewards=known_rewards)
            return recipe, framework.plan(recipe)
        except RecipeInvalid as exc:
            problems: list[FieldError] = list(exc.problems)
        except FieldError as exc:
            problems = [exc]
        except OmegaConfBaseException as exc:  # a value of the wrong type for its field
            bad = next((name for name in fields if name.split(".")[-1] in str(exc)), None)
            if bad is None:
                raise UnirlError(f"the imported recipe does not compose: {exc}") from exc
            problems = [FieldError(bad, fields[bad], str(exc).splitlines()[0])]
        mine = [p for p in problems if p.field in fields]
        if not mine:
            raise RecipeInvalid(problems, context=f"the recipe imported for {framework.name} (set these fields in "
                                                  "the native configuration, or edit the recipe it writes)")
        for p in mine:
            report.reset.append((p.field, fields.pop(p.field), p.allowed))
            origin.pop(p.field, None)
    raise UnirlError("the imported recipe does not plan")


# --- reading native configurations ------------------------------------------------------------------------------

VERL_ENTRY = "verl.trainer.main_ppo"


def hydra_values(overrides: list[str]) -> dict[str, Any]:
    """``key=value`` Hydra overrides -> key -> typed value (Hydra's own grammar: ``1e-6``, ``[a,b]``, ``null``)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    return {f"{o.get_key_element()}": o.value() for o in parsed}


def verl_command(text: str) -> tuple[list[str], list[tuple[str, str]]]:
    """The ``key=value`` arguments of a script's ``python -m verl.trainer.main_ppo`` line (line continuations
    joined, shell quoting removed, ``$VAR`` left as written), and what else stood on it (token, why)."""
    import shlex

    joined = text.replace("\\\r\n", " ").replace("\\\n", " ")
    lines = [line for line in joined.splitlines() if VERL_ENTRY in line and not line.lstrip().startswith("#")]
    if not lines:
        raise UnirlError(f"no `python -m {VERL_ENTRY}` line in the script")
    if len(lines) > 1:
        raise UnirlError(f"{len(lines)} `{VERL_ENTRY}` lines in the script; keep the one to import")
    tokens = shlex.split(lines[0], comments=True)
    tokens = tokens[tokens.index(next(t for t in tokens if t.endswith(VERL_ENTRY))) + 1:]
    return split_overrides(tokens)


def split_overrides(tokens: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    keep: list[str] = []
    other: list[tuple[str, str]] = []
    for i, token in enumerate(tokens):
        if token in ("|", "&&", ";", "||") or token.startswith((">", "2>", "&>")) or token.startswith("tee"):
            other += [(t, "after the command: shell plumbing") for t in tokens[i:]]
            break
        if token.startswith("--config") or token.startswith("-cn") or token.startswith("-cp"):
            other.append((token, "a Hydra config file: import its keys as overrides instead"))
        elif "=" in token and not token.startswith("-"):
            keep.append(token)
        else:
            other.append((token, "not a key=value override (\"$@\" passes the caller's arguments)"))
    return keep, other


def openrlhf_flags(argv: list[str]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """``--flag value`` / ``--switch`` arguments -> flag (without dashes) -> value, with YAML-ish typing."""
    import shlex

    if len(argv) == 1 and ("\n" in argv[0] or " " in argv[0]):
        argv = shlex.split(argv[0].replace("\\\n", " "), comments=True)
    if "openrlhf.cli.train_ppo_ray" in " ".join(argv):
        argv = argv[next(i for i, t in enumerate(argv) if t.endswith("train_ppo_ray")) + 1:]
    flags: dict[str, Any] = {}
    other: list[tuple[str, str]] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if not token.startswith("--"):
            other.append((token, "not a --flag"))
            i += 1
            continue
        name, eq, inline = token[2:].partition("=")
        values: list[str] = [inline] if eq else []
        while not eq and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            values.append(argv[i + 1])
            i += 1
        flags[name] = True if not values else typed(values[0]) if len(values) == 1 else [typed(v) for v in values]
        i += 1
    return flags, other


def typed(text: str) -> Any:
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return {"true": True, "false": False, "True": True, "False": False, "None": None, "null": None}.get(text, text)
