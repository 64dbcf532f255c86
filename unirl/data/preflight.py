"""Checks of the recipe's inputs that read files, made before anything expensive starts (model, backend, run dir).

:func:`unirl.recipe.schema.validate` checks the recipe's values; this module looks at what they point to, cheaply: the
head of every data file (encoding, JSON, one object per row, the prompt and answer columns and their types, at
least one step's worth of prompts), a local model directory's metadata (config.json, the safetensors headers, a
tokenizer), and whether a hub id can be resolved here at all. Each problem is a :class:`FieldError` naming the
recipe field, and all of them are reported at once.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unirl.data.checks import NO_SUCH_FILE, NO_SUCH_MODEL
from unirl.data.columns import MISSING, describe, lookup
from unirl.errors import FieldError
from unirl.jsonl import JsonlError, objects
from unirl.recipe.schema import BUILTIN_PREFIX, HUB_PREFIX, Recipe, hub_source, is_local_path, split_source

HEAD_ROWS = 1000  # rows read from each data file; a whole file is read only when it is smaller
SAFETENSORS_MAX_HEADER = 100 * 2**20
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt")


@dataclass
class DataHead:
    rows: list[dict[str, Any]]
    complete: bool
    """The whole source was read (so ``len(rows)`` is its size), not just its head."""


@dataclass
class InputReport:
    problems: list[FieldError] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)
    """Sources that were not looked at, each with why (a hub dataset, when nothing may be asked of the hub)."""


def check_inputs(recipe: Recipe) -> list[FieldError]:
    """Every problem with the recipe's data files and model location (empty when they look usable)."""
    return inspect_inputs(recipe).problems


def inspect_inputs(recipe: Recipe, *, network: bool = True) -> InputReport:
    """What :func:`check_inputs` finds, and what it did not check.

    ``network=False`` (``unirl plan``): nothing is asked of the Hugging Face hub, so a hub dataset that is not a
    local folder is left unchecked (and listed as such) and a hub model id is not looked up; everything on this
    machine is read as a run would read it: the head of each data file, a builtin dataset's rows, a local dataset
    folder's head through ``datasets``' own resolution of its configs and splits, a local model's metadata."""
    report = InputReport()
    for key, sources, default_split in (("data.train", recipe.data.train_sources, "train"),
                                        ("data.eval", recipe.data.eval_sources, "test")):
        for source in sources:
            report.problems += _check_source(recipe, key, source, default_split, network, report.unchecked)
    if len(recipe.data.train_sources) > 1 and not report.problems:
        from unirl.data.run_length import training_rows

        usable = training_rows(recipe)  # None where one source cannot be counted here (the backend counts it)
        if usable is not None and usable < recipe.algorithm.prompts_per_step:
            report.problems.append(FieldError("data.train", recipe.data.train, f"has {usable} usable rows in all, "
                                              "fewer than one training step (algorithm.prompts_per_step="
                                              f"{recipe.algorithm.prompts_per_step})"))
    if network or is_local_path(recipe.model.path) or recipe.model.path.startswith(BUILTIN_PREFIX):
        report.problems += _check_model(recipe.model.path, recipe.model.revision, network, report.unchecked)
    return report


def _check_source(recipe: Recipe, key: str, source: str, default_split: str, network: bool,
                  unchecked: list[str]) -> list[FieldError]:
    base, split = split_source(source)
    split = split or default_split
    if base.startswith(HUB_PREFIX):
        name, config = hub_source(base)
        if name and Path(name).expanduser().is_dir():
            try:
                head = _hub_folder_head(key, source, name, config, split)
            except FieldError as exc:
                return [exc]
            if head is None:
                unchecked.append(f"{key}={source!r}: not checked (its data files are read by the datasets library "
                                 "only)")
                return []
            return _check_rows(recipe, key, source, head)
        if not network:
            unchecked.append(f"{key}={source!r}: not checked (a hub dataset, and plan asks nothing of the hub; "
                             "`unirl plan --validate` and the run resolve it)")
            return []
        return _check_hub(key, source, name, "dataset")
    if base.startswith(BUILTIN_PREFIX):
        head = _builtin_head(recipe, base[len(BUILTIN_PREFIX):], split)
        return [] if head is None else _check_rows(recipe, key, source, head)
    path = Path(base).expanduser()
    if not path.is_file():  # planning lets it pass (a cluster's path); a run reads and exports its data here
        if not network:
            unchecked.append(f"{key}={source!r}: not on this machine, not read by the plan")
            return []
        return [FieldError(key, source, f"{NO_SUCH_FILE}: a run reads its data where unirl launches it and exports "
                                        "it into the run directory")]
    try:
        head = read_head(path, HEAD_ROWS)
    except FieldError as exc:
        return [FieldError(key, source, exc.allowed)]
    return _check_rows(recipe, key, source, head)


def _builtin_head(recipe: Recipe, name: str, split: str) -> DataHead | None:
    """A builtin dataset's rows, generated (microseconds); None when its name, split or options are wrong (the
    recipe's validation reports those)."""
    from unirl.data.builtin import arith

    options = dict(recipe.data.options)
    if name != "arith" or split not in arith.SPLITS or arith.option_problems(options):
        return None
    try:
        rows = arith.rows(split, options, recipe.seed)
    except ValueError:
        return None
    return DataHead(rows[:HEAD_ROWS], complete=len(rows) <= HEAD_ROWS)


def _hub_folder_head(key: str, source: str, name: str, config: str | None, split: str) -> DataHead | None:
    """The head of a local dataset folder's split, found by ``datasets``' own resolution (its README.md ``configs:``
    header, or its file layout) as ``datasets.load_dataset(name, config, split=split)`` finds it; None when its files
    are of a kind only ``datasets`` reads (csv, arrow...), or ``datasets`` is not installed here."""
    try:
        import datasets
    except ImportError:
        return None
    from unirl.data.loading import hub_hint

    try:  # resolves the config's data files; reads none of them (datasets/load.py, load_dataset_builder)
        builder = datasets.load_dataset_builder(name, config)
    except ValueError as exc:  # "Config name is missing ...", "BuilderConfig 'x' not found ..."
        raise FieldError(key, source, hub_hint(name, config, split, str(exc))) from None
    files = dict(builder.config.data_files or {})
    if split not in files:
        reason = f"Unknown split {split!r}. Should be one of {sorted(files)}."
        raise FieldError(key, source, hub_hint(name, config, split, reason))
    shards = [Path(str(f)) for f in files[split]]
    if not shards or shards[0].suffix not in (".jsonl", ".json", ".parquet"):
        return None
    try:
        head = read_head(shards[0], HEAD_ROWS)
    except FieldError as exc:
        raise FieldError(key, source, f"{shards[0].name}: {exc.allowed}") from None
    return DataHead(head.rows, complete=head.complete and len(shards) == 1)


def read_head(path: Path, limit: int) -> DataHead:
    """Up to ``limit`` rows of a local data file, each a dict; a FieldError (field ``path``) when it is unreadable."""
    suffix = path.suffix
    if suffix == ".parquet":
        return _parquet_head(path, limit)
    if suffix == ".json":
        try:
            loaded = json.loads(path.read_bytes().decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise FieldError(str(path), str(path), f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset "
                                                   f"{exc.start})") from None
        except (json.JSONDecodeError, RecursionError) as exc:
            raise FieldError(str(path), str(path), f"not JSON ({exc})") from None
        if not isinstance(loaded, list):
            raise FieldError(str(path), str(path), f"a .json data file must hold a list of objects, not a "
                                                   f"{type(loaded).__name__}")
        for i, row in enumerate(loaded[:limit]):
            if not isinstance(row, dict):
                raise FieldError(str(path), str(path), f"item {i} is a {type(row).__name__}, not an object")
        return DataHead(loaded[:limit], complete=len(loaded) <= limit)
    rows: list[dict[str, Any]] = []
    try:
        for _, row in objects(path):
            rows.append(row)
            if len(rows) > limit:
                return DataHead(rows[:limit], complete=False)
    except JsonlError as exc:
        raise FieldError(str(path), str(path), exc.reason if not exc.lineno else f"line {exc.lineno}: {exc.reason}") \
            from None
    return DataHead(rows, complete=True)


def _parquet_head(path: Path, limit: int) -> DataHead:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        return DataHead([], complete=False)  # the backend's environment reads it; nothing to check here
    try:
        parquet = pq.ParquetFile(path)
        total = parquet.metadata.num_rows
        rows: list[dict[str, Any]] = []
        for batch in parquet.iter_batches(batch_size=min(limit, 1024)):
            rows.extend(batch.to_pylist())
            if len(rows) >= limit:
                break
    except Exception as exc:  # pyarrow raises several unrelated types for a damaged or foreign file
        raise FieldError(str(path), str(path), f"not a readable parquet file ({type(exc).__name__}: {exc})") from None
    return DataHead(rows[:limit], complete=total <= limit)


def _check_rows(recipe: Recipe, key: str, source: str, head: DataHead) -> list[FieldError]:
    data = recipe.data
    rows = head.rows
    if not rows:
        return [FieldError(key, source, "holds no rows")]
    problems: list[FieldError] = []
    columns = sorted({c for row in rows for c in row})
    kinds: dict[str, int] = {}
    for i, row in enumerate(rows):
        prompt = lookup(row, data.prompt_key)
        if prompt is MISSING:
            problems.append(FieldError("data.prompt_key", data.prompt_key,
                                       f"row {i} of {source} has no such column (its columns: {sorted(row)})"))
            break
        kind = "text" if isinstance(prompt, str) else "messages" if _is_messages(prompt) else type(prompt).__name__
        if kind not in ("text", "messages"):
            problems.append(FieldError(key, source, f"row {i}: the prompt ({data.prompt_key}) is a {kind}; it must "
                                                    "be text or a list of {'role', 'content'} messages"))
            break
        kinds.setdefault(kind, i)
    if len(kinds) > 1:
        problems.append(FieldError(key, source, f"mixes prompt types: text from row {kinds['text']}, chat messages "
                                                f"from row {kinds['messages']}; use one form"))
    if data.answer_key is not None:
        problems += _answer_problems(data.answer_key, source, rows, columns)
    if not problems and data.prompt_template != "{prompt}":
        try:
            data.prompt_template.format(**{**rows[0], "prompt": "x"})
        except (KeyError, IndexError, ValueError) as exc:
            problems.append(FieldError("data.prompt_template", data.prompt_template,
                                       f"a format string over the row's columns {columns}; it fails with {exc!r}"))
    if key == "data.train" and head.complete and len(recipe.data.train_sources) == 1:  # a list: its total counts
        usable = min(len(rows), data.train_rows or len(rows))
        if usable < recipe.algorithm.prompts_per_step:
            problems.append(FieldError(key, source, f"has {usable} usable rows, fewer than one training step "
                                                    f"(algorithm.prompts_per_step={recipe.algorithm.prompts_per_step})"))
    return problems


def _answer_problems(answer_key: str, source: str, rows: list[dict[str, Any]], columns: list[str]
                     ) -> list[FieldError]:
    """The reference column exists in every row and holds a value, not an object (which would reach the rewards as
    the text of a dict, and score 0 with no error)."""
    values = [lookup(row, answer_key) for row in rows]
    missing = [i for i, v in enumerate(values) if v is MISSING]
    if len(missing) == len(rows):
        return [FieldError("data.answer_key", answer_key,
                           f"no row of {source} has this column (its columns: {columns}); name the reference column "
                           "(dotted for a nested one, e.g. reward_model.ground_truth), or null if the rewards need "
                           "no reference")]
    if missing:
        return [FieldError("data.answer_key", answer_key, f"row {missing[0]} of {source} lacks this column "
                                                          f"({len(missing)} of the first {len(rows)} rows do)")]
    objects_at = next((i for i, v in enumerate(values) if isinstance(v, dict)), None)
    if objects_at is not None:
        inner = values[objects_at]
        pick = "ground_truth" if "ground_truth" in inner else next(iter(sorted(inner)), "<field>")
        return [FieldError("data.answer_key", answer_key,
                           f"row {objects_at} of {source} holds {describe(inner)} there, not an answer; name the "
                           f"field inside it, e.g. data.answer_key={answer_key}.{pick}")]
    return []


def _is_messages(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in value)


def _check_model(path: str, revision: str | None, network: bool, unchecked: list[str]) -> list[FieldError]:
    if path.startswith(BUILTIN_PREFIX):
        return []
    if not is_local_path(path):
        return _check_hub("model.path", path, path, "model")
    local = Path(path).expanduser()
    if not local.is_dir():  # planning lets it pass (a cluster's path); a run loads its model here
        if not network:
            unchecked.append(f"model.path={path!r}: not on this machine, not read by the plan")
            return []
        return [FieldError("model.path", path, f"{NO_SUCH_MODEL}: a run launched from here loads the model here")]
    if not (local / "config.json").is_file():
        return []  # recipe.validate reported it
    problems: list[FieldError] = []
    try:
        config = json.loads((local / "config.json").read_text(encoding="utf-8"))
        if not isinstance(config, dict) or "model_type" not in config:
            problems.append(FieldError("model.path", path, "config.json has no model_type: not a transformers model"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        problems.append(FieldError("model.path", path, f"config.json is not JSON ({exc})"))
    index = local / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text(encoding="utf-8")).get("weight_map", {}).values())
        except (UnicodeDecodeError, json.JSONDecodeError, AttributeError) as exc:
            problems.append(FieldError("model.path", path, f"model.safetensors.index.json is not valid ({exc})"))
            shards = set()
        for shard in sorted(shards):
            if not (local / shard).is_file():
                problems.append(FieldError("model.path", path, f"the weight index names {shard}, which is missing"))
    for weights in sorted(local.glob("*.safetensors")):
        reason = safetensors_problem(weights)
        if reason:
            problems.append(FieldError("model.path", path, f"{weights.name}: {reason}"))
    for weights in sorted(local.glob("*.bin")):
        with weights.open("rb") as handle:
            magic = handle.read(4)
        if not (magic.startswith(b"PK\x03\x04") or magic[:1] == b"\x80"):  # torch's zip format, or a raw pickle
            problems.append(FieldError("model.path", path, f"{weights.name} is not a PyTorch weights file"))
    if not any((local / name).is_file() for name in TOKENIZER_FILES):
        problems.append(FieldError("model.path", path, f"no tokenizer files (one of {list(TOKENIZER_FILES)})"))
    return problems


def safetensors_problem(path: Path) -> str | None:
    """Why a .safetensors file is not one (None when its header is sound and its tensors fit in the file)."""
    size = path.stat().st_size
    with path.open("rb") as handle:
        prefix = handle.read(8)
        if len(prefix) < 8:
            return "too short to be a safetensors file"
        (header_len,) = struct.unpack("<Q", prefix)
        if header_len > min(size - 8, SAFETENSORS_MAX_HEADER):
            return "not a safetensors file (its header length does not fit the file)"
        try:
            header = json.loads(handle.read(header_len))
        except (UnicodeDecodeError, json.JSONDecodeError):
            return "not a safetensors file (its header is not JSON)"
    if not isinstance(header, dict):
        return "not a safetensors file (its header is not an object)"
    end = max((int(t["data_offsets"][1]) for k, t in header.items()
               if k != "__metadata__" and isinstance(t, dict) and isinstance(t.get("data_offsets"), list)),
              default=0)
    if 8 + header_len + end > size:
        return f"truncated: its tensors need {8 + header_len + end} bytes, the file has {size}"
    return None


def _check_hub(key: str, value: str, repo_id: str, kind: str) -> list[FieldError]:
    """A hub id must resolve here: in the local cache, or (online) on the hub. Nothing is downloaded."""
    try:
        from huggingface_hub import scan_cache_dir
    except ImportError:
        return []  # the backend's environment resolves it
    name = repo_id.split("@")[0]
    if Path(name).expanduser().exists():
        return []  # a local dataset folder, which datasets.load_dataset accepts as a name
    try:
        cached = {r.repo_id for r in scan_cache_dir().repos if r.repo_type == kind}
    except Exception:  # no cache directory yet
        cached = set()
    if name in cached:
        return []
    offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0") or (
        kind == "dataset" and os.environ.get("HF_DATASETS_OFFLINE", "") not in ("", "0"))
    hint = f"download it first (huggingface-cli download {'--repo-type dataset ' if kind == 'dataset' else ''}{name})" \
           " or point to a local copy"
    if offline:
        return [FieldError(key, value, f"a {kind} in the local Hugging Face cache (HF_HUB_OFFLINE is set); {hint}")]
    try:
        from huggingface_hub import HfApi

        info = HfApi().dataset_info if kind == "dataset" else HfApi().model_info
        info(name, timeout=10)
    except Exception as exc:  # network errors and "not found" alike: the run could not load it either
        reason = type(exc).__name__
        if "NotFound" in reason or "404" in str(exc):
            return [FieldError(key, value, f"no such {kind} on the Hugging Face hub")]
        return [FieldError(key, value, f"not in the local cache, and the Hugging Face hub is not reachable from here "
                                       f"({reason}); {hint}")]
    return []
