"""OpenRLHF's own argument parser and post-parse checks, without importing OpenRLHF's heavy modules.

``openrlhf/cli/train_ppo_ray.py`` builds its parser inline under ``if __name__ == "__main__":`` and imports
vLLM at the top, so it can be neither imported on a machine without vLLM nor asked for its parser. This
module reads that file's syntax tree and executes only the ``__main__`` block's statements (plus the
file's standard-library imports): the genuine ``ArgumentParser`` of the *installed* version, its
``parse_args``, ``hierarchize`` and every assert and rewrite that follows, with ``train`` replaced by a
function that captures the final arguments. Standard library only: it runs in OpenRLHF's interpreter.

    python -m unirl.plugins.openrlhf.parser_schema > schema_<version>.json     # the flag schema unirl renders from
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.util
import io
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

CLI_MODULE = "openrlhf.cli.train_ppo_ray"
# Defaults computed when the parser is built (a timestamped run name): recorded as how they are made.
MADE_AT_LAUNCH = {"logger.wandb.run_name": "<ppo_%m%dT%H:%M at launch>"}
STDLIB = set(sys.stdlib_module_names)


def cli_file() -> Path:
    spec = importlib.util.find_spec(CLI_MODULE)  # imports only the (empty) openrlhf and openrlhf.cli packages
    if spec is None or spec.origin is None:
        raise ImportError(f"{CLI_MODULE} is not installed in {sys.executable}")
    return Path(spec.origin)


def _is_main_guard(node: ast.stmt) -> bool:
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__")


def _calls(node: ast.stmt, attr: str) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == attr
               for n in ast.walk(node))


def _is_stdlib_import(node: ast.stmt) -> bool:
    if isinstance(node, ast.Import):
        return all(a.name.split(".")[0] in STDLIB for a in node.names)
    return isinstance(node, ast.ImportFrom) and node.module is not None and node.module.split(".")[0] in STDLIB


def _stdlib_imports(tree: ast.Module) -> list[ast.stmt]:
    return [node for node in tree.body if _is_stdlib_import(node)]


def _main_block(path: Path) -> tuple[ast.Module, list[ast.stmt]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    guard = next((n for n in tree.body if _is_main_guard(n)), None)
    if guard is None:
        raise RuntimeError(f"{path} has no `if __name__ == '__main__':` block; OpenRLHF's layout changed")
    return tree, guard.body  # type: ignore[attr-defined]


def _hierarchize() -> Any:
    """OpenRLHF's own ``hierarchize`` (openrlhf/utils/config.py), loaded by path: its package imports transformers."""
    config = cli_file().parent.parent / "utils" / "config.py"
    spec = importlib.util.spec_from_file_location("openrlhf_utils_config", config)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.hierarchize


def get_parser(path: Path | None = None) -> argparse.ArgumentParser:
    path = path or cli_file()
    tree, body = _main_block(path)
    before = []
    for stmt in body:
        if _calls(stmt, "parse_args"):
            break
        before.append(stmt)
    namespace: dict[str, Any] = {"__name__": "unirl_openrlhf_parser"}
    exec(compile(ast.Module(_stdlib_imports(tree) + before, []), str(path), "exec"), namespace)
    parser: argparse.ArgumentParser = namespace["parser"]
    return parser


class _Captured(Exception):
    def __init__(self, args: Any) -> None:
        self.args_seen = args


class _DropOpenrlhfImports(ast.NodeTransformer):
    """``from openrlhf.utils.config import hierarchize`` inside the block: supplied by path instead."""

    def visit_ImportFrom(self, node: ast.ImportFrom) -> Any:
        return ast.Pass() if node.module and node.module.startswith("openrlhf") else node


def validate(argv: list[str], path: Path | None = None) -> tuple[Any, list[str]]:
    """Run the whole ``__main__`` block on ``argv`` up to ``train(args)``: OpenRLHF's parse, rewrites and asserts.

    Returns (the arguments as ``train`` would receive them, what the block printed). Raises ``SystemExit``
    (argparse's error, message on stderr) or ``AssertionError`` (OpenRLHF's own check, with its message).
    """
    path = path or cli_file()
    tree, body = _main_block(path)
    block = ast.Module(_stdlib_imports(tree) + [_DropOpenrlhfImports().visit(s) for s in body], [])
    ast.fix_missing_locations(block)

    def capture(args: Any) -> None:
        raise _Captured(args)

    namespace: dict[str, Any] = {"__name__": "unirl_openrlhf_validate", "train": capture,
                                 "hierarchize": _hierarchize()}
    printed = io.StringIO()
    saved = sys.argv
    sys.argv = [str(path), *argv]
    try:
        with contextlib.redirect_stdout(printed):
            exec(compile(block, str(path), "exec"), namespace)
    except _Captured as done:
        return done.args_seen, [line for line in printed.getvalue().splitlines() if line.strip()]
    finally:
        sys.argv = saved
    raise RuntimeError("the __main__ block finished without calling train(args)")


def train_time_problems(args: SimpleNamespace) -> list[str]:
    """The asserts ``train()`` makes after ``ray.init`` (train_ppo_ray.py:41-64), made before anything starts."""
    a, problems = args, []
    if (a.train.colocate_actor_ref or a.train.colocate_all) and a.algo.kl.init_coef > 0 and not (
            a.actor.num_nodes == a.ref.num_nodes and a.actor.num_gpus_per_node == a.ref.num_gpus_per_node):
        problems.append("num_nodes and num_gpus_per_node must be the same when colocate actor and ref model "
                        "(train_ppo_ray.py:42-46)")
    if (a.vllm.num_engines or 0) > 0 and a.train.colocate_all and not a.train.async_enable:
        actor = a.actor.num_nodes * a.actor.num_gpus_per_node
        engines = a.vllm.num_engines * a.vllm.tensor_parallel_size
        if actor != engines:
            problems.append(f"actor_num_nodes * actor_num_gpus_per_node ({actor}) must equal vllm_num_engines * "
                            f"vllm_tensor_parallel_size ({engines}) (train_ppo_ray.py:56-64)")
    if not a.vllm.num_engines:
        problems.append("--vllm.num_engines is unset: OpenRLHF 0.11 generates only with vLLM engines "
                        "(samples_generator.py has no other path)")
    if a.rollout.max_new_tokens is not None and a.rollout.max_new_tokens >= a.data.max_len:
        # --data.max_len is vLLM's max_model_len (train_ppo_ray.py:53-74) and the length every experience is cut to
        # (samples_generator.py:208, 245): completions this long could never be generated or trained on.
        problems.append(f"--rollout.max_new_tokens={a.rollout.max_new_tokens} leaves no room for the prompt in "
                        f"--data.max_len={a.data.max_len} (prompt + completion: vLLM's max_model_len and the "
                        "length every sequence is cut to, train_ppo_ray.py:53-74, samples_generator.py:208)")
    return problems


def schema(parser: argparse.ArgumentParser | None = None) -> list[dict[str, Any]]:
    """Every option: its flag, dest, kind (value, store_true, store_false), type, default, choices, nargs."""
    parser = parser or get_parser()
    out = []
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        kind = ("store_true" if isinstance(action, argparse._StoreTrueAction)
                else "store_false" if isinstance(action, argparse._StoreFalseAction) else "value")
        out.append({
            "flag": max(action.option_strings, key=len), "dest": action.dest, "kind": kind,
            "type": getattr(action.type, "__name__", None) if action.type else None,
            "default": MADE_AT_LAUNCH.get(action.dest, action.default if _plain(action.default)
                                          else repr(action.default)),
            "choices": list(action.choices) if action.choices else None,
            "nargs": action.nargs if isinstance(action.nargs, int | str) else None,
            "required": action.required,
        })
    return sorted(out, key=lambda o: o["dest"])


def _plain(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def main() -> None:
    import importlib.metadata as md

    print(json.dumps({"openrlhf": md.version("openrlhf"), "options": schema()}, indent=1))


if __name__ == "__main__":
    main()
