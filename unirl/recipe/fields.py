"""Recipe fields that carry their own documentation: help, unit, range and choices as dataclass field metadata.

One declaration per field (``lr: float = setting(1e-6, "Learning rate ...", above=0, typo_above=1.0)``, or
``field(default_factory=dict, metadata=documented(...))`` for a mutable default) drives the
generic validation pass (:func:`field_problems`), ``unirl explain`` and the field list of ``unirl plan --help``.
OmegaConf's structured configs ignore field metadata, so the schema Hydra composes against is unchanged.
Checks that involve several fields (batch arithmetic, rollout GPUs, rewards named by eval) stay explicit functions in
:mod:`unirl.recipe.schema`.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import itertools
import math
import textwrap
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import NoneType, UnionType
from typing import Any

from unirl.errors import FieldError

METADATA_KEY = "unirl"
AUTO = "auto"
"""The value of a field each backend resolves for itself and the machine (a field declared with ``auto=``)."""


@dataclass(frozen=True)
class Range:
    """Allowed numbers: a lower and an upper bound, each inclusive or exclusive (open)."""

    low: float | None = None
    low_open: bool = False
    high: float | None = None
    high_open: bool = False

    def contains(self, value: float) -> bool:
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def text(self) -> str:
        """``>= 1``, ``> 0``, ``in (0, 1]``: how refusals and ``unirl explain`` say it."""
        if self.low is not None and self.high is not None:
            return (f"in {'(' if self.low_open else '['}{number(self.low)}, {number(self.high)}"
                    f"{')' if self.high_open else ']'}")
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {number(self.low)}"
        if self.high is not None:
            return f"{'<' if self.high_open else '<='} {number(self.high)}"
        return "any number"


def number(value: float) -> str:
    """A bound as people write it: ``1048576`` and ``10000000`` whole, ``0.5`` and ``1e-06`` as Python prints them."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


@dataclass(frozen=True)
class FieldDoc:
    """What a recipe field means and which values it takes."""

    help: str
    unit: str = ""
    """What one of it counts (tokens, prompts, optimizer updates, ...); empty where it has no unit."""
    range: Range | None = None
    why: str = ""
    """Why the range, appended to a refusal (``must be >= 2: GRPO compares completions within a group``)."""
    typo_above: float | None = None
    """Values above this are beyond any real run (a typo or a unit mistake, ``steps=1e10``), refused as such."""
    choices: tuple[str, ...] = ()
    choices_from: str = ""
    """A host registry whose names are the choices (``rollout_engines``): plugins add to it, so no tuple here."""
    auto: str = ""
    """What ``auto`` resolves to, for a field that takes it (empty: it does not): each backend resolves it for itself
    and the machine (:mod:`unirl.backend.auto`), and the plan shows ``auto -> value (why)``."""


def setting(default: Any, help: str, *, unit: str = "", at_least: float | None = None, above: float | None = None,
            at_most: float | None = None, below: float | None = None, why: str = "", typo_above: float | None = None,
            choices: tuple[str, ...] = (), choices_from: str = "", auto: str = "") -> Any:
    """A dataclass field with an immutable default, its documentation and its checks (see :func:`documented`).

    Returns what :func:`dataclasses.field` returns, so the schema stays a plain dataclass."""
    return dataclasses.field(default=default, metadata=documented(
        help, unit=unit, at_least=at_least, above=above, at_most=at_most, below=below, why=why,
        typo_above=typo_above, choices=choices, choices_from=choices_from, auto=auto))


def documented(help: str, *, unit: str = "", at_least: float | None = None, above: float | None = None,
               at_most: float | None = None, below: float | None = None, why: str = "",
               typo_above: float | None = None, choices: tuple[str, ...] = (),
               choices_from: str = "", auto: str = "") -> dict[str, Any]:
    """Field metadata: ``help`` (as TRL's configs have it) and the :class:`FieldDoc`; for a mutable default write
    ``field(default_factory=dict, metadata=documented("..."))``. ``at_least``/``above`` and ``at_most``/``below`` are
    the inclusive/exclusive bounds."""
    bounded = any(b is not None for b in (at_least, above, at_most, below))
    valid = Range(low=above if above is not None else at_least, low_open=above is not None,
                  high=below if below is not None else at_most, high_open=below is not None) if bounded else None
    doc = FieldDoc(help=" ".join(help.split()), unit=unit, range=valid, why=why, typo_above=typo_above,
                   choices=choices, choices_from=choices_from, auto=" ".join(auto.split()))
    return {"help": doc.help, METADATA_KEY: doc}


def field_doc(f: dataclasses.Field[Any]) -> FieldDoc | None:
    doc = f.metadata.get(METADATA_KEY)
    return doc if isinstance(doc, FieldDoc) else None


@functools.cache
def attribute_docs(schema: type) -> dict[str, str]:
    """Field name -> the docstring written under it, for groups declared without :func:`setting` (``reward_policy``
    validates itself): Python keeps no attribute docstrings at run time, so they are read from the source."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(schema)))
    except (OSError, TypeError, SyntaxError):
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs: dict[str, str] = {}
    for node, after in itertools.pairwise(body):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
            docs[node.target.id] = " ".join(after.value.value.split())
    return docs


# --- the schema as a list of documented fields ------------------------------------------------------------------


@dataclass(frozen=True)
class FieldInfo:
    """One leaf field of the schema, by its dotted name (``rewards[].weight`` for a list of groups)."""

    name: str
    type_text: str
    default: Any
    optional: bool
    doc: FieldDoc | None


@functools.cache
def _hints(schema: type) -> dict[str, Any]:
    """A schema's resolved annotations (its module writes them as strings: ``from __future__ import annotations``)."""
    return typing.get_type_hints(schema)


def schema_fields(schema: type, prefix: str = "") -> Iterator[FieldInfo]:
    """Every leaf field of a dataclass schema, depth first, in declaration order."""
    hints = _hints(schema)
    for f in dataclasses.fields(schema):
        hint = hints[f.name]
        group = _group_of(hint)
        name = f"{prefix}{f.name}"
        if group is not None:
            list_of = typing.get_origin(hint) is list
            yield from schema_fields(group, f"{name}[]." if list_of else f"{name}.")
            continue
        doc = field_doc(f)
        if doc is None and f.name in attribute_docs(schema):
            doc = FieldDoc(help=attribute_docs(schema)[f.name])
        yield FieldInfo(name, _type_text(hint), _default_of(f), _is_optional(hint), doc)


def normalise(dotted: str) -> str:
    """``rewards[0].weight``, ``rewards.0.weight`` and ``rewards[].weight`` all name ``rewards[].weight``."""
    parts: list[str] = []
    for part in dotted.replace("[]", "").split("."):
        base, _, _ = part.partition("[")
        if base.isdigit() and parts:
            parts[-1] += "[]"
        elif "[" in part:
            parts.append(f"{base}[]")
        else:
            parts.append(base)
    return ".".join(parts)


def value_at(root: object, dotted: str) -> Any:
    """The value of a dotted field (``algorithm.lr``); None where a part does not exist (``rewards[].weight``)."""
    obj: Any = root
    for part in dotted.replace("[]", "").split("."):
        obj = getattr(obj, part, None)
    return obj


def _group_of(hint: Any) -> type | None:
    """The dataclass a field holds, directly or as list items; None for a leaf."""
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return hint
    if typing.get_origin(hint) is list:
        (item,) = typing.get_args(hint)
        if isinstance(item, type) and dataclasses.is_dataclass(item):
            return item
    return None


def _is_optional(hint: Any) -> bool:
    return (typing.get_origin(hint) in (typing.Union, UnionType)) and NoneType in typing.get_args(hint)


def _type_text(hint: Any) -> str:
    if typing.get_origin(hint) in (typing.Union, UnionType):
        return " | ".join("null" if a is NoneType else _type_text(a) for a in typing.get_args(hint))
    if typing.get_origin(hint) is not None:
        return str(typing.get_origin(hint).__name__)
    return getattr(hint, "__name__", str(hint))


def _default_of(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


# --- the generic validation pass ---------------------------------------------------------------------------------


def field_problems(obj: object, registries: Mapping[str, Sequence[str]], prefix: str = "") -> list[FieldError]:
    """Every per-field problem of a recipe (or one of its groups): finite floats, choices, ranges, typo bounds.

    A group that checks itself (it has a ``problems()`` method, as ``reward_policy`` does) is asked instead of walked.
    ``registries`` supplies the choices of fields declared with ``choices_from`` (the host's registered names).
    """
    found: list[FieldError] = []
    group: type = type(obj)
    hints = _hints(group)
    for f in dataclasses.fields(obj):  # type: ignore[arg-type]
        value = getattr(obj, f.name)
        key = f"{prefix}{f.name}"
        problems = getattr(value, "problems", None)
        if dataclasses.is_dataclass(value) and callable(problems):
            found += problems()
        elif dataclasses.is_dataclass(value):
            found += field_problems(value, registries, f"{key}.")
        elif isinstance(value, list) and _group_of(hints[f.name]) is not None:
            for i, item in enumerate(value):
                found += field_problems(item, registries, f"{key}[{i}].")
        else:
            found += value_problems(key, value, field_doc(f), _is_optional(hints[f.name]), registries)
    return found


def value_problems(key: str, value: Any, doc: FieldDoc | None, optional: bool,
                   registries: Mapping[str, Sequence[str]]) -> list[FieldError]:
    """At most one problem for one value: the first of not finite, not a choice, out of range, beyond any real run."""
    if value is None or isinstance(value, bool):
        return []  # null is what Optional fields take; OmegaConf already typed the rest
    if isinstance(value, float) and not math.isfinite(value):
        # NaN silently disables comparisons: a NaN reward weight drops that reward, max_grad_norm=nan disables clipping.
        return [FieldError(key, value, "must be a finite number (NaN and infinity are not allowed)")]
    if doc is None:
        return []
    if doc.auto and value == AUTO:
        return []  # each backend resolves it (unirl.backend.auto); a recipe is checked again once it is resolved
    if doc.auto and isinstance(value, str) and not (doc.choices or doc.choices_from):
        allowed = f"a number {doc.range.text()}" if doc.range is not None else "true or false"
        return [FieldError(key, value, f"{allowed}, or auto ({doc.auto})")]
    choices = tuple(registries.get(doc.choices_from, ())) if doc.choices_from else doc.choices
    if choices and doc.auto and value not in choices:
        return [FieldError(key, value, f"one of {[*choices, AUTO]}")]
    if choices and value not in choices:
        return [FieldError(key, value, f"one of {list(choices)}")]
    if not isinstance(value, int | float):
        return []
    if doc.range is not None and not doc.range.contains(value):
        return [FieldError(key, value, f"must be {doc.range.text()}{', or null' if optional else ''}"
                                       f"{': ' + doc.why if doc.why else ''}")]
    if doc.typo_above is not None and value > doc.typo_above:
        return [FieldError(key, value, f"must be at most {number(doc.typo_above)}; is this a typo?")]
    return []
