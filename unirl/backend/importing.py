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
from unirl.data.run_length import training_rows
from unirl.errors import FieldError, RecipeInvalid, UnirlError
from unirl.recipe.fields import FieldInfo, schema_fields, value_at
from unirl.recipe.schema import Recipe, recipe_from_dict, validate
from unirl.versions import matches

PLANNED = {"verl": "overrides", "openrlhf": "flags", "trl": "trainer_config"}
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
    refused: list[tuple[str, Any, str]] = field(default_factory=list)
    """(native key, value, why): kept in ``framework.overrides`` as written, but the plan refuses it (a name the
    installed version does not have): the recipe does not plan until it is changed."""

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
        if self.refused:
            lines.append(f"refused by the plan: in framework.overrides, edit before running ({len(self.refused)}):")
            lines += [f"  {key} = {value!r}: {why}" for key, value, why in self.refused]
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


def unknown_override(framework: Any, key: str) -> str | None:
    """Why the backend would refuse ``key`` as an override (a key its config does not have), where it can say."""
    check = getattr(framework, "unknown_override", None)
    return check(key) if check is not None else None


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
    # what leaving a key out means on the backend, where no default value says it (OpenRLHF: no --eval.dataset is no
    # held-out set; no --rollout.max_new_tokens lets each completion have what its prompt leaves of --data.max_len)
    implied: dict[str, Any] = {}
    kept_unset: dict[str, Any] = {}
    if hasattr(framework, "import_defaults"):
        implied, kept_unset = framework.import_defaults(native)
    native = {**native, **kept_unset}
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
    read_lengths: set[str] = set()  # run-length keys an inverse read (Mapping.run_length)
    set_by: dict[int, dict[str, Any]] = {}  # what each row's inverse set, undone when its second pass refuses
    # renames and lookups first, then the explicit inverses twice (one may read a field another sets)
    for row, inverter in [*generic, *[(r, r.inverse) for r in explicit], *[(r, r.inverse) for r in explicit]]:
        keys = [k for k in keys_of(row) if k in effective]
        if not keys or inverter is None:
            continue
        if row.recipe_field in (given or {}) and not any(k in native for k in keys):
            continue  # what the caller gave wins over a default the command does not state
        value = effective[keys[0]] if len(keys_of(row)) == 1 else {k: effective[k] for k in keys}
        if value is None and keys[0] in kept_unset:
            continue  # a key the command leaves out, kept so (import_defaults says what the recipe holds instead)
        info = infos.get(row.recipe_field)
        if isinstance(value, str) and "$" in value and (info is None or kind(info) in ("int", "float", "bool")):
            continue  # a shell reference for a number stays native, as written
        if isinstance(value, str) and value.startswith(RUN_DIR):
            continue  # a path unirl itself sends (a plan read back): no recipe field in it
        try:
            found = inverter(value, view)
        except (ValueError, ZeroDivisionError, TypeError) as exc:
            failed[keys[0]] = str(exc)
            for name, v in set_by.pop(id(row), {}).items():  # the first pass's answer, read before what refutes it
                if name in fields and same(fields[name], v):
                    del fields[name]
                    origin.pop(name, None)
            continue
        failed.pop(keys[0], None)
        set_by[id(row)] = dict(found)
        if row.run_length:
            read_lengths.update(k for k in keys if k in native)
        for name, v in found.items():
            fields[name] = v
            origin.setdefault(name, [])
            origin[name] += [k for k in keys if k not in origin[name]]
    for key, value in native.items():
        if any(isinstance(v, str) and "$" in v for v in (value if isinstance(value, list) else [value])):
            report.unresolved.append((key, value))
    for name, value in implied.items():
        fields[name] = value

    read_from = {name: list(keys) for name, keys in origin.items()}
    recipe, plan = settle(framework, known_rewards, base, fields, origin, report)
    # A default the command relies on that the recipe could not take (an inverse refused it, or the plan refused
    # the field it gave) stays as the command had it: the backend's default, sent explicitly
    kept_defaults = {k for k in failed if k not in native}
    kept_defaults |= {k for name, _, _ in report.reset for k in read_from.get(name, []) if k not in native}
    native_with_defaults = {**native, **{k: effective[k] for k in sorted(kept_defaults) if k in effective}}
    planned = dict(plan.native_config[PLANNED.get(backend, "overrides")])
    overrides: dict[str, Any] = {}
    consumed = {k: name for name, keys in origin.items() for k in keys}
    row_field = {k: m.recipe_field for m in table for k in keys_of(m)}
    uncarried: list[FieldError] = []
    for key, value in native_with_defaults.items():
        mine = planned.get(key, OMIT)
        if key not in native:  # a default kept: sent explicitly only where the plan would send another value
            if not same(mine, value):
                overrides[key] = value
            continue
        if key in dropped:
            report.dropped.append((key, value, dropped[key]))
        elif key not in row_field and (why := unknown_override(framework, key)):
            report.dropped.append((key, value, why))  # the backend's own config has no such key: its run fails
        elif key in read_lengths and key not in failed:
            report.mapped.append((key, consumed.get(key, f"({row_field.get(key, 'run length')})"),
                                  fields.get(consumed[key]) if key in consumed else value))
        elif isinstance(mine, str) and mine.startswith(RUN_DIR) and key in consumed:
            report.mapped.append((key, consumed[key], fields.get(consumed[key])))
        elif isinstance(mine, str) and mine.startswith(RUN_DIR) and key in failed and row_field.get(key, "") not in (
                given or {}):  # the run's own data, in a form the recipe cannot hold: unirl would export other rows
            uncarried.append(FieldError(key, value, f"{failed[key]}; name the data in a form unirl reads with "
                                                    f"--set {row_field.get(key, 'data.train')}=..."))
        elif isinstance(mine, str) and mine.startswith(RUN_DIR):
            report.dropped.append((key, value, f"a path unirl sets itself ({mine})"))
        elif mine is not OMIT and same(mine, value):
            if key in consumed:
                report.mapped.append((key, consumed[key], fields.get(consumed[key])))
            else:
                report.mapped.append((key, f"({row_field.get(key, 'launch')}: unirl sends the same)", value))
        else:
            overrides[key] = value
    if uncarried:
        raise RecipeInvalid(uncarried, context=f"import: the {backend} command's data, which the recipe cannot hold")
    if overrides:
        recipe = build(base, fields, overrides)
        kept = dict(overrides)
        for _ in range(len(overrides) + 1):
            try:
                plan = framework.plan(build(base, fields, kept))
                break
            except (RecipeInvalid, FieldError) as exc:
                problems = list(exc.problems) if isinstance(exc, RecipeInvalid) else [exc]
                bad = [(p.field.removeprefix("framework.overrides."), p) for p in problems
                       if p.field.removeprefix("framework.overrides.") in kept]
                if not bad:
                    raise
                for key, problem in bad:
                    report.refused.append((key, kept.pop(key), problem.allowed))
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
            report.reset.append((key, native_with_defaults[key], f"kept native: {why}"))
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
            if p.field in fields:  # two problems may name one field
                report.reset.append((p.field, fields.pop(p.field), p.allowed))
                origin.pop(p.field, None)
    raise UnirlError("the imported recipe does not plan")


# --- reading native configurations ------------------------------------------------------------------------------

VERL_ENTRY = "verl.trainer.main_ppo"
OPENRLHF_ENTRY = "openrlhf.cli.train_ppo_ray"


def hydra_values(overrides: list[str]) -> dict[str, Any]:
    """``key=value`` Hydra overrides -> key -> typed value (Hydra's own grammar: ``1e-6``, ``[a,b]``, ``null``)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    return {f"{o.get_key_element()}": o.value() for o in parsed}


# A shell script read as far as its configuration needs, never run: ``NAME=value`` / ``export NAME=value`` and
# ``NAME=( ... )`` arrays outside ``if``/``for``/``while``/``case`` blocks, then the entry command's words with
# ``$NAME``, ``${NAME}``, ``${NAME:-default}``, ``${NAME[@]}``, ``$((arithmetic))`` and ``$(basename|dirname X)``
# expanded, quotes removed and unquoted expansions split into words as bash does. A variable the script does not set
# (``$HOME``, ``$SLURM_JOB_NUM_NODES``, one set only inside a block) stays as written, unless ``env`` gives it.

SHELL_BLOCK_OPEN = ("if", "for", "while", "until", "case", "select")
SHELL_BLOCK_CLOSE = ("fi", "done", "esac")


class Word:
    """One shell word as written: (quoting, text) segments, quoting one of "bare", "single", "double"."""

    def __init__(self) -> None:
        self.parts: list[tuple[str, str]] = []

    def add(self, quoting: str, text: str) -> None:
        if self.parts and self.parts[-1][0] == quoting:
            self.parts[-1] = (quoting, self.parts[-1][1] + text)
        else:
            self.parts.append((quoting, text))

    def raw(self) -> str:
        return "".join(text for _, text in self.parts)


def dollar_span(text: str, at: int) -> int:
    """The end of the ``$...`` reference starting at ``text[at]`` (``$((..))``, ``$(..)``, ``${..}``, ``$NAME``)."""
    nxt = text[at + 1:at + 2]
    if nxt in ("(", "{"):
        close = ")" if nxt == "(" else "}"
        depth, i = 0, at + 1
        while i < len(text):
            if text[i] == nxt:
                depth += 1
            elif text[i] == close:
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
        return len(text)
    if nxt and (nxt.isalpha() or nxt == "_"):
        i = at + 1
        while i < len(text) and (text[i].isalnum() or text[i] == "_"):
            i += 1
        return i
    return at + 2 if nxt else at + 1


def shell_words(text: str) -> list[Word]:
    """Split ``text`` into words as the shell does before expansion (comments removed, newlines as spaces)."""
    words: list[Word] = []
    word: Word | None = None
    i = 0
    while i < len(text):
        c = text[i]
        if c in " \t\r\n":
            if word is not None:
                words.append(word)
                word = None
            i += 1
            continue
        if c == "#" and word is None:
            while i < len(text) and text[i] != "\n":
                i += 1
            continue
        word = word if word is not None else Word()
        if c == "'":
            end = text.find("'", i + 1)
            end = len(text) if end < 0 else end
            word.add("single", text[i + 1:end])
            i = end + 1
        elif c == '"':
            j, buf = i + 1, ""
            while j < len(text) and text[j] != '"':
                if text[j] == "\\" and j + 1 < len(text) and text[j + 1] in '"\\$`':
                    buf += text[j + 1] if text[j + 1] != "$" else "\\$"
                    j += 2
                elif text[j] == "$":
                    end = dollar_span(text, j)
                    buf += text[j:end]
                    j = end
                else:
                    buf += text[j]
                    j += 1
            word.add("double", buf)
            i = j + 1
        elif c == "\\" and i + 1 < len(text):
            word.add("single", text[i + 1])
            i += 2
        elif c == "$":
            end = dollar_span(text, i)
            word.add("bare", text[i:end])
            i = end
        else:
            word.add("bare", c)
            i += 1
    if word is not None:
        words.append(word)
    return words


Env = dict[str, "str | list[str]"]
HOLD = "\x00"
"""Stands for a space inside a command substitution left as written, so that word splitting keeps it one word."""


def arithmetic(expr: str, env: Env) -> int | None:
    """``$(( expr ))`` over integers (+ - * / % and parentheses), names read from ``env``; None when it cannot."""
    import ast
    import re

    def name(m: re.Match[str]) -> str:
        value = env.get(m.group(1).lstrip("$").strip("{}"), "")
        return value if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()) else "x"

    text = re.sub(r"(\$?\{?[A-Za-z_]\w*\}?)", name, expr)
    if len(text) > 10_000:  # an expression of a launch script is short; ast.parse of a deep one would recurse
        return None
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, RecursionError, MemoryError, ValueError):
        return None
    ops: dict[type, Callable[[int, int], int]] = {
        ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
        ast.Div: lambda a, b: int(a / b), ast.FloorDiv: lambda a, b: int(a / b), ast.Mod: lambda a, b: a % b}

    def wrap(value: int) -> int:  # bash's arithmetic is 64-bit: A=$((A*A)) repeated must not grow without bound
        return (value + 2**63) % 2**64 - 2**63

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return wrap(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return wrap(-ev(node.operand))
        if isinstance(node, ast.BinOp) and type(node.op) in ops:
            return wrap(ops[type(node.op)](ev(node.left), ev(node.right)))
        raise ValueError("not shell arithmetic")
    try:
        return ev(tree)
    except (ValueError, ZeroDivisionError, RecursionError):
        return None


def expand(text: str, env: Env, quoted: bool) -> list[str]:
    """The references in one segment expanded; several results only for an array (``${A[@]}``)."""
    import os
    import re

    out: list[str] = [""]
    i = 0
    while i < len(text):
        if text.startswith("\\$", i):
            out[-1] += "$"
            i += 2
            continue
        if text[i] != "$":
            out[-1] += text[i]
            i += 1
            continue
        end = dollar_span(text, i)
        ref = text[i:end]
        value: str | list[str] = ref
        if ref.startswith("$((") and ref.endswith("))"):
            number = arithmetic(ref[3:-2], env)
            value = ref if number is None else str(number)
        elif ref.startswith("$("):
            m = re.fullmatch(r"\$\(\s*(basename|dirname)\s+(.+?)\s*\)", ref)
            if m:
                arg = " ".join(expand_word(shell_words(m.group(2))[0], env)) if shell_words(m.group(2)) else ""
                if "$" not in arg:
                    value = os.path.basename(arg) if m.group(1) == "basename" else os.path.dirname(arg)
            if value == ref:  # not run: one word as written, whatever spaces it holds (HOLD until the command)
                value = ref.replace(" ", HOLD)
        elif ref.startswith("${"):
            m = re.fullmatch(r"\$\{([A-Za-z_]\w*)(\[[@*]\])?(?:(:?[-=])(.*))?\}", ref, re.S)
            if m:
                name, index, op, default = m.groups()
                have = env.get(name)
                if have is not None and not (op and op.startswith(":") and have in ("", [])):
                    value = have if index or isinstance(have, str) else (have[0] if have else "")
                elif op:  # the default is a word of its own: its quotes removed, its references expanded
                    value = " ".join(w for word in shell_words(default) for w in expand_word(word, env)) \
                        if default.strip() else ""
                else:  # not set here: as written, in the form no YAML or Hydra interpolation reads as its own
                    value = f"${name}"
        elif len(ref) > 1 and (ref[1].isalpha() or ref[1] == "_"):
            have = env.get(ref[1:])
            if have is not None:
                value = have if isinstance(have, str) else (have[0] if have else "")
        i = end
        if isinstance(value, list):
            if not value:  # an empty array: no word
                continue
            out[-1] += value[0]
            out += value[1:]
        else:
            out[-1] += value
        if len(out[-1]) > MAX_EXPANDED_CHARS or len(out) > MAX_EXPANDED_CHARS // 8:
            raise UnirlError(f"{text[:60]!r}... expands to over {MAX_EXPANDED_CHARS:,} characters; a launch "
                             "script's words are short (is a variable defined in terms of itself, repeatedly?)")
    return out


def expand_word(word: Word, env: Env) -> list[str]:
    """One word -> the words after expansion, quote removal and splitting of the unquoted expansions."""
    fields: list[str] = []
    current: str | None = None
    for quoting, text in word.parts:
        if quoting == "single":
            current = (current or "") + text
            continue
        pieces = expand(text, env, quoting == "double")
        for n, piece in enumerate(pieces):
            if n:  # an array's elements are words of their own
                if current is not None:
                    fields.append(current)
                current = None
            if quoting == "double":
                current = (current or "") + piece
                continue
            split = piece.split()
            if not split:
                if piece and current is not None:  # only spaces: a word boundary
                    fields.append(current)
                    current = None
                continue
            if piece[:1].isspace() and current is not None:
                fields.append(current)
                current = None
            current = (current or "") + split[0]
            for extra in split[1:]:
                fields.append(current)
                current = extra
            if piece[-1:].isspace():
                fields.append(current)
                current = None
    if current is not None:
        fields.append(current)
    return fields


def logical_lines(text: str) -> list[tuple[int, str]]:
    """(line number, text) of each command: continuations joined, a quoted string or an array ``( ... )`` that spans
    lines kept whole."""
    out: list[tuple[int, str]] = []
    buf, first, depth, quote = "", 0, 0, ""
    for number, line in enumerate(text.splitlines(), 1):
        if not buf:
            first = number
        i = 0
        while i < len(line):
            c = line[i]
            if quote:
                if c == "\\" and quote == '"':
                    i += 1
                elif c == quote:
                    quote = ""
            elif c in "'\"":
                quote = c
            elif c == "\\":
                i += 1
            elif c == "#" and (i == 0 or line[i - 1] in " \t"):
                line = line[:i]
                break
            elif c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
            i += 1
        if line.endswith("\\") and not line.endswith("\\\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        if quote or depth > 0:
            buf += "\n"
            continue
        if buf.strip():
            out.append((first, buf))
        buf, depth = "", 0
    if buf.strip():
        out.append((first, buf))
    return out


@dataclass
class ShellCommand:
    line: int
    words: list[str]
    """After expansion; the entry point (``...main_ppo``, ``...train_ppo_ray``) is ``words[0]``."""
    before: list[str]
    """The words before the entry point (``python3 -m``, ``ray job submit ... --``)."""


MAX_SCRIPT_BYTES = 1 << 20
"""The largest script, config or JSON file ``unirl import`` reads: a launch script is a few kB."""
MAX_EXPANDED_CHARS = 1 << 20
"""The most one variable or command may expand to: ``A=$B$B`` repeated doubles each line, so a script of a few
hundred bytes could otherwise ask for gigabytes."""


def bounded(values: Env, name: str, line: int) -> None:
    """Refuse a variable whose value grew past :data:`MAX_EXPANDED_CHARS` (an expansion bomb), before the next line
    builds on it."""
    value = values[name]
    size = len(value) if isinstance(value, str) else sum(map(len, value))
    if size > MAX_EXPANDED_CHARS:
        raise UnirlError(f"line {line}: {name} expands to over {MAX_EXPANDED_CHARS:,} characters; a launch script's "
                         "variables are short (is it defined in terms of itself, repeatedly?)")


def script_commands(text: str, entry: str, env: dict[str, str] | None = None) -> list[ShellCommand]:
    """Every command of a shell script that runs ``entry``, expanded with the variables the script sets before it
    (``env`` first: the caller's environment, e.g. ``SLURM_JOB_NUM_NODES``)."""
    import re

    values: Env = dict(env or {})
    found: list[ShellCommand] = []
    depth = 0
    assign = re.compile(r"\s*(?:export\s+|declare\s+(?:-\w+\s+)?|local\s+|readonly\s+)?([A-Za-z_]\w*)=(.*)", re.S)
    for number, line in logical_lines(text):
        for part in re.split(r"[;&|]+", line):
            head = part.strip().split(maxsplit=1)[0] if part.strip() else ""
            if head in SHELL_BLOCK_OPEN:
                depth += 1
            if head in SHELL_BLOCK_CLOSE:
                depth = max(0, depth - 1)
        m = assign.fullmatch(line)
        if m and entry not in line:
            if depth:
                continue  # set in a branch or a loop: which value holds depends on the run
            name, value = m.groups()
            value = value.strip()
            if value.startswith("(") and value.endswith(")"):
                values[name] = [w for word in shell_words(value[1:-1]) for w in expand_word(word, values)]
            else:
                expanded = [w for word in shell_words(value)[:1] for w in expand_word(word, values)]
                values[name] = " ".join(expanded)
            bounded(values, name, number)
            continue
        if entry in line:
            words = [w.replace(HOLD, " ") for word in shell_words(line) for w in expand_word(word, values)]
            if sum(map(len, words)) > MAX_EXPANDED_CHARS:
                raise UnirlError(f"line {number}: the command expands to over {MAX_EXPANDED_CHARS:,} characters; a "
                                 "training command is a few kB (is a variable defined in terms of itself?)")
            at = next((i for i, w in enumerate(words) if w.endswith(entry)), None)
            if at is not None:
                found.append(ShellCommand(number, words[at:], words[:at]))
    return found


def one_command(commands: list[ShellCommand], entry: str, which: int | None) -> ShellCommand:
    if not commands:
        raise UnirlError(f"no `{entry}` command in the script")
    if which is not None:
        if not 1 <= which <= len(commands):
            raise UnirlError(f"--command {which}: the script has {len(commands)} `{entry}` command(s)")
        return commands[which - 1]
    if len(commands) > 1:
        lines = ", ".join(str(c.line) for c in commands)
        raise UnirlError(f"{len(commands)} `{entry}` commands in the script (lines {lines}); choose one with "
                         f"--command N (1 to {len(commands)})")
    return commands[0]


def verl_command(text: str, env: dict[str, str] | None = None,
                 which: int | None = None) -> tuple[list[str], list[tuple[str, str]]]:
    """The ``key=value`` arguments of a script's ``python -m verl.trainer.main_ppo`` command (line continuations
    joined, the script's own variables expanded, shell quoting removed, a variable it does not set left as written),
    and what else stood on it (token, why). ``which``: the 1-based command where the script has several."""
    command = one_command(script_commands(text, VERL_ENTRY, env), VERL_ENTRY, which)
    return split_overrides(command.words[1:])


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


# OpenRLHF's flat flag names before the dotted hierarchy (OpenRLHF/OpenRLHF ed62d0e2, "feat(cli,muon): dotted config
# hierarchy", first released in 0.10.2) -> the 0.11 names: openrlhf/cli/train_ppo_ray.py at v0.10.1 (33f9d72f) and
# v0.11.0 (3c3be623), the add_argument calls aligned in order by type/default/action; the flags whose call moved
# (the optimizer's, now per model under --actor.* / --critic.*) read from v0.11.0's add_optimizer_args (lines 445-474).
# Names absent here that 0.11 dropped (--ptx_coef, --actor_init_on_gpu, --perf) have no successor: they stay as
# written in framework.overrides, where the plan's check against 0.11's parser names them.
OPENRLHF_FLAT = {
    "ref_num_nodes": "ref.num_nodes", "ref_num_gpus_per_node": "ref.num_gpus_per_node",
    "reward_num_nodes": "reward.num_nodes", "reward_num_gpus_per_node": "reward.num_gpus_per_node",
    "colocate_actor_ref": "train.colocate_actor_ref", "actor_num_nodes": "actor.num_nodes",
    "actor_num_gpus_per_node": "actor.num_gpus_per_node", "critic_num_nodes": "critic.num_nodes",
    "critic_num_gpus_per_node": "critic.num_gpus_per_node", "colocate_critic_reward": "train.colocate_critic_reward",
    "colocate_all_models": "train.colocate_all", "vllm_num_engines": "vllm.num_engines",
    "vllm_tensor_parallel_size": "vllm.tensor_parallel_size", "vllm_sync_backend": "vllm.sync_backend",
    "vllm_sync_with_ray": "vllm.sync_with_ray", "enable_prefix_caching": "vllm.enable_prefix_caching",
    "enforce_eager": "vllm.enforce_eager", "vllm_enable_sleep": "vllm.enable_sleep",
    "vllm_gpu_memory_utilization": "vllm.gpu_memory_utilization",
    "enable_vllm_is_correction": "algo.advantage.is_correction_enable",
    "vllm_enable_is_correction": "algo.advantage.is_correction_enable",  # the examples' spelling at v0.10.1
    "vllm_is_truncated_threshold": "algo.advantage.is_correction_threshold",
    "vllm_is_correction_type": "algo.advantage.is_correction_type", "async_train": "train.async_enable",
    "async_queue_size": "train.async_queue_size", "partial_rollout": "train.partial_rollout_enable",
    "eval_steps": "eval.steps", "save_steps": "ckpt.save_steps", "logging_steps": "logger.logging_steps",
    "ckpt_path": "ckpt.path", "save_hf_ckpt": "ckpt.save_hf", "disable_ds_ckpt": "ckpt.disable_ds",
    "max_ckpt_num": "ckpt.max_num", "max_ckpt_mem": "ckpt.max_mem", "load_checkpoint": "ckpt.load_enable",
    "best_metric_key": "ckpt.best_metric_key", "use_ds_universal_ckpt": "ds.use_universal_ckpt",
    "zero_stage": "ds.zero_stage", "gradient_checkpointing": "actor.gradient_checkpointing_enable",
    "deepcompile": "ds.deepcompile", "param_dtype": "ds.param_dtype", "enable_ema": "train.enable_ema",
    "ema_beta": "train.ema_beta", "zpg": "ds.zpg", "adam_offload": "ds.adam_offload",
    "attn_implementation": "ds.attn_implementation", "use_liger_kernel": "ds.use_liger_kernel",
    "grad_accum_dtype": "ds.grad_accum_dtype", "overlap_comm": "ds.overlap_comm",
    "gradient_checkpointing_use_reentrant": "actor.gradient_checkpointing_reentrant",
    "disable_fast_tokenizer": "data.disable_fast_tokenizer", "dataloader_num_workers": "data.dataloader_num_workers",
    "deepspeed_enable_sleep": "ds.enable_sleep", "ds_tensor_parallel_size": "ds.tensor_parallel_size",
    "packing_samples": "ds.packing_samples", "use_dynamic_batch": "train.dynamic_batch_enable",
    "rollout_max_tokens_per_gpu": "rollout.max_tokens_per_gpu", "train_max_tokens_per_gpu": "train.max_tokens_per_gpu",
    "load_in_4bit": "ds.load_in_4bit", "lora_rank": "ds.lora.rank", "lora_alpha": "ds.lora.alpha",
    "target_modules": "ds.lora.target_modules", "lora_dropout": "ds.lora.dropout", "save_path": "ckpt.output_dir",
    "num_episodes": "train.num_episodes", "rollout_batch_size": "rollout.batch_size",
    "vllm_generate_batch_size": "rollout.vllm_generate_batch_size",
    "micro_rollout_batch_size": "rollout.micro_batch_size", "max_epochs": "train.max_epochs",
    "max_len": "data.max_len", "max_new_tokens": "rollout.max_new_tokens", "max_samples": "data.max_samples",
    "eps_clip": "actor.eps_clip", "eps_clip_low_high": "actor.eps_clip_low_high", "dual_clip": "actor.dual_clip",
    "value_clip": "critic.value_clip", "lambd": "algo.advantage.lambd", "gamma": "algo.advantage.gamma",
    "micro_train_batch_size": "train.micro_batch_size", "train_batch_size": "train.batch_size",
    "normalize_reward": "reward.normalize_enable", "top_p": "rollout.top_p", "temperature": "rollout.temperature",
    "seed": "train.seed", "full_determinism": "train.full_determinism_enable",
    "freezing_actor_steps": "critic.freezing_steps", "n_samples_per_prompt": "rollout.n_samples_per_prompt",
    "save_value_network": "critic.save_value_network", "kl_target": "algo.kl.target",
    "kl_horizon": "algo.kl.horizon", "init_kl_coef": "algo.kl.init_coef", "policy_loss_type": "actor.policy_loss_type",
    "kl_estimator": "algo.kl.estimator", "aux_loss_coef": "actor.aux_loss_coef",
    "entropy_loss_coef": "actor.entropy_coef", "reward_clip_range": "reward.clip_range",
    "advantage_estimator": "algo.advantage.estimator", "use_kl_loss": "algo.kl.use_loss",
    "no_advantage_std_norm": "algo.advantage.no_std_norm", "overlong_buffer_len": "reward.overlong_buffer_len",
    "overlong_penalty_factor": "reward.overlong_penalty_factor",
    "stop_properly_penalty_coef": "reward.stop_properly_penalty_coef", "ring_attn_size": "ds.ring_attn_size",
    "ring_head_stride": "ds.ring_attn_head_stride", "pretrain": "actor.model_name_or_path",
    "reward_pretrain": "reward.model_name_or_path", "remote_rm_url": "reward.remote_url",
    "critic_pretrain": "critic.model_name_or_path", "value_head_prefix": "ds.value_head_prefix",
    "agent_func_path": "train.agent_func_path", "prompt_data": "data.prompt_dataset",
    "prompt_data_probs": "data.prompt_probs", "prompt_split": "data.prompt_split", "eval_dataset": "eval.dataset",
    "eval_split": "eval.split", "eval_temperature": "eval.temperature",
    "eval_n_samples_per_prompt": "eval.n_samples_per_prompt", "input_key": "data.input_key",
    "label_key": "data.label_key", "input_template": "data.input_template",
    "apply_chat_template": "data.apply_chat_template", "use_wandb": "logger.wandb.key", "wandb_org": "logger.wandb.org",
    "wandb_group": "logger.wandb.group", "wandb_project": "logger.wandb.project",
    "wandb_run_name": "logger.wandb.run_name", "dynamic_filtering": "algo.dynamic_filtering_enable",
    "dynamic_filtering_reward_range": "algo.dynamic_filtering_range", "image_key": "data.image_key",
    "max_images_per_prompt": "data.max_images_per_prompt", "freeze_visual_encoder": "actor.freeze_visual_encoder",
    "use_tensorboard": "logger.tensorboard_dir",
    # moved into add_optimizer_args(prefix) (v0.11.0 train_ppo_ray.py:445-474)
    "actor_learning_rate": "actor.adam.lr", "critic_learning_rate": "critic.adam.lr",
    "lr_warmup_ratio": "actor.lr_warmup_ratio", "lr_scheduler": "actor.lr_scheduler", "adam_betas": "actor.adam.betas",
    "max_norm": "actor.max_norm", "l2": "actor.adam.weight_decay",
    "ref_reward_offload": "ref.offload",  # split into --ref.offload and --reward.offload; GRPO has no reward model
}


def openrlhf_0_11_0(flags: dict[str, Any], other: list[tuple[str, str]]) -> None:
    """OpenRLHF 0.11.0's importance-sampling switches as 0.11.2 spells them (its official examples at v0.11.0 use
    ``--algo.advantage.is_correction_enable`` [``--algo.advantage.is_correction_type tis|icepop|seq-mask-tis``],
    v0.11.0 openrlhf/cli/train_ppo_ray.py:256-272; 0.11.2 has ``is_correction_level off|token|seq`` and
    ``is_correction_mode mask|clip`` instead, its train_ppo_ray.py:256-290, whose comment names the schemes: "TIS =
    token clip, ICEPOP = token mask, seq-mask-tis = seq mask")."""
    enable, kind = "algo.advantage.is_correction_enable", "algo.advantage.is_correction_type"
    if enable not in flags and kind not in flags:
        return
    on = flags.pop(enable, False) is True
    scheme = flags.pop(kind, "tis")
    level, mode = {"tis": ("token", "clip"), "icepop": ("token", "mask"), "seq-mask-tis": ("seq", "mask")}.get(
        str(scheme), (None, None))
    if level is None or mode is None:
        flags[kind] = scheme  # no 0.11.2 spelling: left as written, for the plan's check to name
        if on:
            flags[enable] = True
        return
    if on:
        flags["algo.advantage.is_correction_level"] = level
        flags["algo.advantage.is_correction_mode"] = mode
    other.append((f"--{enable}" + (f" --{kind} {scheme}" if kind in flags or scheme != "tis" else ""),
                  f"OpenRLHF 0.11.0's spelling: read as --algo.advantage.is_correction_level {level if on else 'off'}"
                  + (f" --algo.advantage.is_correction_mode {mode}" if on else "") + " (0.11.2)"))


def openrlhf_flags(argv: list[str], env: dict[str, str] | None = None,
                   which: int | None = None) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """``--flag value`` / ``--switch`` arguments -> flag (without dashes) -> value, with YAML-ish typing; one argument
    holding a script's text (or a command line) is read as a script: its ``train_ppo_ray`` command with the script's
    variables and arrays expanded (``ray job submit ... -- python3 -m openrlhf.cli.train_ppo_ray ${ARGS[@]}``).
    A flat pre-0.10.2 name becomes its 0.11 dotted name (:data:`OPENRLHF_FLAT`), reported in the second list."""
    if len(argv) == 1 and ("\n" in argv[0] or " " in argv[0]):
        if OPENRLHF_ENTRY in argv[0]:
            argv = one_command(script_commands(argv[0], OPENRLHF_ENTRY, env), OPENRLHF_ENTRY, which).words[1:]
        else:
            argv = [w.replace(HOLD, " ") for word in shell_words(argv[0].replace("\\\n", " "))
                    for w in expand_word(word, dict(env or {}))]
    elif any(t.endswith(OPENRLHF_ENTRY) for t in argv):
        argv = argv[next(i for i, t in enumerate(argv) if t.endswith(OPENRLHF_ENTRY)) + 1:]
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
        while not eq and i + 1 < len(argv) and not (argv[i + 1].startswith("--") and not is_number(argv[i + 1])):
            values.append(argv[i + 1])
            i += 1
        if "." not in name and name in OPENRLHF_FLAT:
            other.append((f"--{name}", f"OpenRLHF's flat name before 0.10.2: read as --{OPENRLHF_FLAT[name]}"))
            name = OPENRLHF_FLAT[name]
        flags[name] = True if not values else typed(values[0]) if len(values) == 1 else [typed(v) for v in values]
        i += 1
    openrlhf_0_11_0(flags, other)
    return flags, other


def is_number(text: str) -> bool:
    return not isinstance(typed(text), str) and not isinstance(typed(text), bool)


def typed(text: str) -> Any:
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return {"true": True, "false": False, "True": True, "False": False, "None": None, "null": None}.get(text, text)


TRL_CONFIG_CLASSES = ("GRPOConfig", "RLOOConfig")
CONFIG_CLASS_KEY = "__config_class__"
"""In a JSON of TRL keyword arguments: which config class they build (GRPOConfig when absent)."""


def trl_config_call(source: str) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The keyword arguments of a Python script's ``GRPOConfig(...)`` or ``RLOOConfig(...)`` call (the last one), as
    literals, with :data:`CONFIG_CLASS_KEY` naming the class; arguments that are not literals (a variable, a
    function call) are returned as not imported, with why. The script is parsed, never run."""
    import ast

    if len(source) > MAX_SCRIPT_BYTES:
        raise ValueError(f"a script of {len(source):,} characters: at most {MAX_SCRIPT_BYTES:,}")
    try:
        tree = ast.parse(source)
    except (SyntaxError, RecursionError, ValueError) as exc:
        raise ValueError(f"not a Python script unirl can read ({type(exc).__name__})") from None
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
             and (getattr(node.func, "id", None) or getattr(node.func, "attr", None)) in TRL_CONFIG_CLASSES]
    if not calls:
        raise ValueError(f"no {' or '.join(TRL_CONFIG_CLASSES)}(...) call in the script")
    call = max(calls, key=lambda node: node.lineno)
    name = getattr(call.func, "id", None) or getattr(call.func, "attr", "")
    kwargs: dict[str, Any] = {CONFIG_CLASS_KEY: name}
    skipped: list[tuple[str, str]] = []
    for keyword in call.keywords:
        if keyword.arg is None:
            skipped.append((f"**{ast.unparse(keyword.value)}", "keyword arguments unpacked from a variable"))
            continue
        try:
            kwargs[keyword.arg] = ast.literal_eval(keyword.value)
        except (ValueError, TypeError, SyntaxError, RecursionError):
            skipped.append((f"{keyword.arg}={ast.unparse(keyword.value)[:80]}", "not a literal value (set it in "
                                                                               "the recipe, or as a native override)"))
    return kwargs, skipped


def effective_runs(framework: Any, native: dict[str, Any], recipe: Recipe, config_class: str | None = None
                   ) -> tuple[Any, Any] | None:
    """The effective runs (:mod:`unirl.backend.effective_run`) of a native configuration and of the plan of the
    recipe imported from it, or None for a backend that has no reader of its own configuration. The rows are not
    known here (the data is usually elsewhere), except in the plan's own export when the plan counted them, and
    where the command names no data (a GRPOConfig): then both run on the recipe's, counted where they can be."""
    if getattr(framework, "effective_run", None) is None:
        return None
    rows = None if names_data(framework, native) else training_rows(recipe)
    return framework.effective_run(native, rows, config_class), planned_run(framework, recipe, rows)


def names_data(framework: Any, native: dict[str, Any]) -> bool:
    """Whether the native configuration names its training data (a GRPOConfig cannot; a verl or OpenRLHF command
    may leave it out). A backend that does not say is taken to."""
    keys = getattr(framework, "import_data_keys", None)
    return keys is None or any(k in native for k in keys)


def planned_run(framework: Any, recipe: Recipe, rows: int | None) -> Any:
    """The effective run of the recipe's plan on its backend: over the exported rows where the plan fixes them (a
    step count, or epochs it counted: steps x prompts_per_step), else over ``rows``, the data's (None: unknown)."""
    plan = framework.plan(recipe)
    planned = dict(plan.native_config[PLANNED.get(framework.name, "overrides")])
    counted = any(a.field == "algorithm.steps" and a.source != "auto" for a in plan.auto)
    exported = recipe.prompts_per_run if counted or recipe.algorithm.epochs is None else rows
    trainer = plan.native_config.get("trainer")
    config_class = str(trainer).replace("Trainer", "Config") if framework.name == "trl" and trainer else None
    return framework.effective_run(planned, exported, config_class)
