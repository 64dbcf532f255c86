"""A hub or local model left with the toy recipe's settings gets one warning naming them (unirl/recipe/toy_settings.py).

The toy values are the embedded default's (unirl/recipe/recipes/grpo_math.yaml: max_new_tokens=2, lr=1e-3,
numeric_closeness and bare_number), made for builtin:tiny-arith.
"""

from __future__ import annotations

import json

from tests.support.cli import run_cli
from unirl.data.builtin.tiny_model import build_tokenizer

REAL = "model.path=Qwen/Qwen2.5-0.5B-Instruct"
TOY = "recipe=grpo_math"  # named: a command with its own model and no recipe composes recipe=base instead


def warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "settings sized for the toy arithmetic task" in line]


def test_real_model_on_toy_recipe_warns_once_naming_each_field() -> None:
    out = run_cli("plan", TOY, REAL)
    assert out.returncode == 0, out.stderr
    [line] = warnings(out.stderr)
    for text in ("model.path=Qwen/Qwen2.5-0.5B-Instruct", "algorithm.max_new_tokens=2", "algorithm.lr=0.001",
                 "numeric_closeness", "bare_number", "recipe=gsm8k_grpo"):
        assert text in line, line


def test_only_the_toy_fields_still_set_are_named() -> None:
    out = run_cli("plan", TOY, REAL, "algorithm.max_new_tokens=512", "algorithm.lr=1e-6")
    [line] = warnings(out.stderr)
    named = line.split("task (", 1)[1].split(")", 1)[0]
    assert named == "rewards=['numeric_closeness', 'bare_number']"


def test_real_settings_and_builtin_model_do_not_warn() -> None:
    fixed = run_cli("plan", TOY, REAL, "algorithm.max_new_tokens=512", "algorithm.lr=1e-6",
                    "rewards=[{name:math_answer}]")
    toy = run_cli("plan")  # the toy recipe on its own builtin model: exactly what it is for
    assert fixed.returncode == toy.returncode == 0
    assert warnings(fixed.stderr) == warnings(toy.stderr) == []


def test_warning_reaches_backend_plans_too() -> None:
    out = run_cli("plan", "+framework=verl", TOY, REAL, "data.chat_template=true", "rollout.engine=vllm")
    assert len(warnings(out.stderr)) == 1, out.stderr


def test_a_real_model_without_a_recipe_gets_real_defaults_not_the_toys() -> None:
    """`unirl model.path=... data.train=...` with no recipe: the schema's defaults for a real model (recipes/base.yaml),
    said once; the toy's learning rate, schedule, token budget and shaping rewards stay with recipe=grpo_math."""
    out = run_cli("plan", "--json", REAL, "resources.gpus_per_node=1")
    assert out.returncode == 0, out.stderr
    a = json.loads(out.stdout)["recipe"]["algorithm"]
    assert (a["lr"], a["lr_schedule"], a["max_new_tokens"]) == (1e-6, "constant", 512)
    assert [r["name"] for r in json.loads(out.stdout)["recipe"]["rewards"]] == ["math_answer"]
    assert "unirl's defaults for a real model (recipe=base)" in out.stderr and warnings(out.stderr) == []
    toy = json.loads(run_cli("plan", "--json").stdout)["recipe"]["algorithm"]  # no model of its own: the toy
    assert (toy["lr"], toy["lr_schedule"], toy["max_new_tokens"]) == (1e-3, "cosine", 2)


def test_builtin_tokenizer_chat_template_renders_and_round_trips() -> None:
    """Chat-only backends render prompts with the tokenizer's template; the builtin one joins message contents after
    <bos>, so a rendered prompt is the very tokens of the raw text (which the tokenizer starts with <bos>): verl always
    renders, TRL tokenizes the text of a builtin model's prompt."""
    tok = build_tokenizer()
    messages = [{"role": "user", "content": "3+4="}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == "<bos>3+4="
    ids = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, return_dict=False)
    assert tok.decode(ids, skip_special_tokens=True) == "3+4="
    assert tok.unk_token_id not in ids
    assert ids == tok("3+4=")["input_ids"] == [tok.bos_token_id, *tok("3+4=", add_special_tokens=False)["input_ids"]]
