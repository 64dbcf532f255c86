"""What a recipe's data and model must be, checked before anything loads: a builtin dataset or model that exists
(and the builtin task's options), a hub id, or a local file or model directory of the right kind. Cheap: it reads
no data file and loads no model (the preflight, :mod:`unirl.data.preflight`, reads what a run will read)."""

from __future__ import annotations

from pathlib import Path

from unirl.data.builtin import arith
from unirl.data.builtin.tiny_model import SHAPES
from unirl.errors import FieldError
from unirl.recipe.fields import value_at
from unirl.recipe.schema import BUILTIN_PREFIX, HUB_PREFIX, Recipe, hub_source, is_local_path, sources_of, split_source

DATA_SUFFIXES = (".jsonl", ".json", ".parquet")
NO_SUCH_FILE = "no such file on this machine"
NO_SUCH_MODEL = ("no such directory on this machine; give a hub id (org/name), a local model directory, or "
                 "builtin:<name>")
NOT_HERE = (NO_SUCH_FILE, NO_SUCH_MODEL)
"""What a plan made here lets pass: a cluster's path (a run launched from here checks them, in the preflight)."""
BUILTIN_DATASETS = ("arith", "lookup")


def data_problems(recipe: Recipe, *, missing_files: bool = True) -> list[FieldError]:
    """Every problem with the recipe's model and data sources (``missing_files=False``: a data file that is not on
    this machine is not one, for a plan made here of a run that reads it elsewhere)."""
    problems = [p for p in model_problems(recipe.model.path) if missing_files or p.allowed not in NOT_HERE]
    for key in ("data.train", "data.eval"):
        value = value_at(recipe, key)
        shape = source_shape_problem(key, value)
        if shape:
            problems.append(shape)
            continue
        for source in sources_of(value):
            problems += [p for p in source_problems(key, source)
                         if missing_files or p.allowed not in NOT_HERE]
    return [*problems, *builtin_data_option_problems(recipe)]


def source_shape_problem(key: str, value: object) -> FieldError | None:
    """A data field is one source or a non-empty list of them (``data.eval`` may be null)."""
    if value is None:
        return None if key == "data.eval" else FieldError(key, value, "a data source (builtin:, hf: or a file)")
    if isinstance(value, str) and value.strip():
        return None
    if isinstance(value, list | tuple) and value and all(isinstance(v, str) and v.strip() for v in value):
        return None
    return FieldError(key, value, "a data source (builtin:<name>@<split>, hf:<dataset>@<split> or a file), or a "
                                  "non-empty list of them")


def missing_data_files(recipe: Recipe) -> list[str]:
    """The local model directory and data files the recipe names that are not on this machine (a cluster's
    paths, say)."""
    missing = [f"model.path={recipe.model.path}" for p in model_problems(recipe.model.path)
               if p.allowed == NO_SUCH_MODEL]
    for key in ("data.train", "data.eval"):
        value = value_at(recipe, key)
        if source_shape_problem(key, value):
            continue
        missing += [f"{key}={source}" for source in sources_of(value)
                    if any(p.allowed == NO_SUCH_FILE for p in source_problems(key, source))]
    return missing


def model_problems(path: str, builtin_models: tuple[str, ...] = tuple(SHAPES)) -> list[FieldError]:
    """``model.path``: a known builtin, a hub id (resolved by the backend when it loads), or a model directory."""
    if path.startswith(BUILTIN_PREFIX):
        name = path[len(BUILTIN_PREFIX):]
        return [] if name in builtin_models else [FieldError("model.path", path,
                                                             f"builtin models are {list(builtin_models)}")]
    if not is_local_path(path):
        return []  # a hub id: resolved (and cached) by transformers when the backend loads it
    local = Path(path).expanduser()
    if not local.is_dir():
        return [FieldError("model.path", path, NO_SUCH_MODEL)]
    if not (local / "config.json").is_file():
        return [FieldError("model.path", path, "directory has no config.json; not a transformers model")]
    if not any(local.glob("*.safetensors")) and not any(local.glob("*.bin")):
        return [FieldError("model.path", path, "directory has no *.safetensors or *.bin weights")]
    return []


def source_problems(key: str, source: str | None, builtin_data: tuple[str, ...] = BUILTIN_DATASETS
                    ) -> list[FieldError]:
    """``data.train`` / ``data.eval``: a builtin dataset and split, a hub dataset, or a data file that exists."""
    if source is None:
        return []
    base, split = split_source(source)
    if base.startswith(BUILTIN_PREFIX):
        name = base[len(BUILTIN_PREFIX):]
        if name not in builtin_data:
            return [FieldError(key, source, f"builtin datasets are {list(builtin_data)}")]
        if name == "arith" and split and split not in arith.SPLITS:
            return [FieldError(key, source, f"builtin:arith splits are {list(arith.SPLITS)}")]
        if name == "lookup" and split and split not in ("train", "heldout"):
            return [FieldError(key, source, "builtin:lookup splits are ['train', 'heldout']")]
        return []
    if base.startswith(HUB_PREFIX):
        name, config = hub_source(base)
        if not name or config == "":
            return [FieldError(key, source, "a hub dataset is hf:<dataset>[:<config>]@<split>, e.g. "
                               "hf:openai/gsm8k:main@train")]
        return []
    path = Path(base).expanduser()
    if path.suffix not in DATA_SUFFIXES:
        return [FieldError(key, source, f"a data file must end in one of {list(DATA_SUFFIXES)}, or use "
                           "hf:<dataset>[:<config>]@<split> or builtin:<name>@<split>")]
    if not path.is_file():
        return [FieldError(key, source, NO_SUCH_FILE)]
    return []


def builtin_data_option_problems(recipe: Recipe) -> list[FieldError]:
    """``data.options`` of the builtin arithmetic task, when the recipe uses it."""
    used = {split_source(s)[0] for s in [*recipe.data.train_sources, *recipe.data.eval_sources]}
    if f"{BUILTIN_PREFIX}arith" not in used:
        return []
    return [FieldError(f"data.options.{option}", value, allowed)
            for option, value, allowed in arith.option_problems(recipe.data.options)]
