"""Megatron's architecture flags for slime and vime, derived from a Hugging Face ``config.json``.

Megatron cannot read a Hugging Face config, so slime's users pass the architecture as flags: the ``MODEL_ARGS`` of
slime's ``scripts/models/<model>.sh`` (THUDM/slime 624b824a898ab0ec1fcb4d373004c7f3852bf515). This module writes those
flags from the config, by the rule each script follows, for the plain decoder-only families slime ships scripts for:

* Qwen2 / Qwen2.5 (``model_type`` qwen2): scripts/models/qwen2.5-0.5B.sh:1-16, qwen2.5-1.5B.sh:1-16,
  qwen2.5-7B.sh:1-17: q/k/v with bias, no other bias (``--disable-bias-linear --add-qkv-bias``; transformers 5.24
  models/qwen2/modeling_qwen2.py:181-184), no ``--kv-channels`` (Qwen2Config has no head_dim field, the model uses
  hidden/heads, modeling_qwen2.py:176, as Megatron does by default, megatron/training/arguments.py:812-814).
* Qwen3 dense (qwen3): scripts/models/qwen3-0.6B.sh:1-17, qwen3-4B.sh:1-17, qwen3-8B.sh:1-18: no bias, q/k RMSNorm
  per head (``--qk-layernorm``; modeling_qwen3.py:229-230), ``--kv-channels <head_dim>`` always (Qwen3Config.head_dim,
  default 128, is not hidden/heads for most sizes).
* Llama 3.x (llama): scripts/models/llama3.1-8B-Instruct.sh:1-20: no bias, ``--kv-channels <head_dim>``,
  ``--max-position-embeddings``, and llama3 RoPE scaling as ``--use-rope-scaling``.

Every family: ``--swiglu`` (hidden_act silu), RMSNorm with the config's epsilon, rotary embeddings with
``--rotary-base`` = rope_theta, grouped-query attention when there are fewer key/value heads than query heads,
``--vocab-size``, and ``--untie-embeddings-and-output-weights`` unless the embeddings are tied.

slime asserts at start that the Megatron args agree with the HF config (slime/backends/megatron_utils/arguments.py:
97-148, called from megatron_parse_args at :193-200): hidden_size, num_attention_heads, num_hidden_layers,
intermediate_size, tie_word_embeddings, rms_norm_eps and rope_theta. The flags below take those values from the
config by the same attribute names, with the same defaults transformers fills in (``DEFAULTS``; slime reads the
config with ``AutoConfig.from_pretrained``, arguments.py:199), so a derived flag list passes that assertion.

Pure Python over the JSON dict: no transformers import (``unirl plan`` imports no torch, and transformers does).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

SLIME_COMMIT = "624b824a898ab0ec1fcb4d373004c7f3852bf515"
MEGATRON_COMMIT = "1dcf0dafa884ad52ffb243625717a3471643e087"
FAMILIES = ("qwen2", "qwen3", "llama")

DEFAULTS: dict[str, dict[str, Any]] = {
    # What transformers 5.24 fills in for a key config.json leaves out (models/qwen2/configuration_qwen2.py:60-77,
    # qwen3/configuration_qwen3.py:61-83, llama/configuration_llama.py:63-89); rope_theta defaults to 10000.0 in each
    # (the rope_parameters standardisation, modeling_rope_utils.py). A missing num_key_value_heads is 32 for Qwen;
    # an explicit null means as many as the query heads (every class's __post_init__). head_dim None = hidden/heads.
    # tests/test_slime_model_args.py checks this table against the installed classes.
    "qwen2": {"vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
              "num_attention_heads": 32, "num_key_value_heads": 32, "hidden_act": "silu",
              "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
              "rope_theta": 10000.0, "use_sliding_window": False},
    "qwen3": {"vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
              "num_attention_heads": 32, "num_key_value_heads": 32, "head_dim": 128, "hidden_act": "silu",
              "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
              "rope_theta": 10000.0, "attention_bias": False, "use_sliding_window": False},
    "llama": {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
              "num_attention_heads": 32, "num_key_value_heads": None, "head_dim": None, "hidden_act": "silu",
              "max_position_embeddings": 2048, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
              "rope_theta": 10000.0, "attention_bias": False, "mlp_bias": False},
}

MEGATRON_LLAMA3_SCALING = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                           "original_max_position_embeddings": 8192}
"""The only llama3 RoPE scaling slime's Megatron model applies: ``--use-rope-scaling`` reaches GPTModel as
``rope_scaling=True`` with no factor (slime/backends/megatron_utils/model_provider.py:200-214), so RotaryEmbedding's
defaults hold (megatron/core/models/gpt/gpt_model.py:105-106, common/embeddings/rotary_pos_embedding.py:92-98).
``--rope-scaling-factor`` is never passed on, and ``--rotary-scaling-factor`` (what llama3.x scripts set) is read
only by multi-latent attention's YaRN (megatron/core/transformer/multi_latent_attention.py:125-141)."""

MOE_KEYS = ("moe_intermediate_size", "num_experts", "n_routed_experts", "num_local_experts")
"""What makes a config mixture-of-experts to slime (slime/backends/megatron_utils/arguments.py:64-73)."""


class ModelArgsError(ValueError):
    """The config cannot be turned into Megatron flags here; the message says why and what to set instead."""


def _set_instead(example: str = "") -> str:
    hint = f", e.g. from slime's scripts/models/{example}" if example else " (copy slime's scripts/models/<model>.sh)"
    return f"set framework.model_args to the model's Megatron flags{hint} or framework.model_args_script"


def resolved(config: dict[str, Any]) -> dict[str, Any]:
    """The config as transformers would read it for the fields the derivation uses: class defaults filled in,
    ``rope_theta`` and the llama3 scaling from either layout (4.x top-level ``rope_theta`` / ``rope_scaling``, or
    5.x ``rope_parameters``), ``num_key_value_heads`` and ``head_dim`` resolved as the classes' __post_init__ does."""
    family = str(config.get("model_type", ""))
    out = {**DEFAULTS[family], **{k: v for k, v in config.items() if k in DEFAULTS[family]}}
    if config.get("head_dim") is not None:  # an extra attribute Qwen2's attention reads too (modeling_qwen2.py:176)
        out["head_dim"] = config["head_dim"]
    params = config.get("rope_parameters")
    scaling = config.get("rope_scaling")
    rope: dict[str, Any] = dict(params) if isinstance(params, dict) else {}
    if isinstance(scaling, dict):
        rope = {**scaling, **rope}
    if "rope_theta" in rope:
        out["rope_theta"] = rope["rope_theta"]
    elif "rope_theta" in config:
        out["rope_theta"] = config["rope_theta"]
    kind = rope.get("rope_type", rope.get("type", "default"))
    out["rope_scaling"] = None if kind == "default" else {k: v for k, v in rope.items() if k != "rope_theta"}
    if out["num_key_value_heads"] is None:
        out["num_key_value_heads"] = out["num_attention_heads"]
    if "head_dim" in out and out["head_dim"] is None:
        out["head_dim"] = out["hidden_size"] // out["num_attention_heads"]
    return out


def architecture(config: dict[str, Any]) -> str:
    """How a refusal names the model: its architectures entry and model_type."""
    names = config.get("architectures") or []
    kind = config.get("model_type", "?")
    return f"{names[0]} (model_type {kind})" if names else f"model_type {kind}"


def refusal(config: dict[str, Any]) -> str | None:
    """Why the config is not one this module derives flags for, or None."""
    arch, family = architecture(config), config.get("model_type")
    if any(key in config for key in MOE_KEYS) or "moe" in str(family):
        return (f"{arch} is a mixture-of-experts model; unirl derives Megatron flags only for dense "
                f"{', '.join(FAMILIES)} models: {_set_instead('qwen3-30B-A3B.sh for Qwen3 MoE')}")
    if "text_config" in config:
        return f"{arch} is a multimodal model (its language model is under text_config): {_set_instead()}"
    if family not in FAMILIES:
        return (f"{arch}: unirl derives Megatron flags for the dense decoder families slime ships scripts for "
                f"({', '.join(FAMILIES)}), not this one: {_set_instead()}")
    c = resolved(config)
    if c["hidden_act"] != "silu":
        return f"{arch}: hidden_act {c['hidden_act']!r} is not SwiGLU's silu (--swiglu): {_set_instead()}"
    if c.get("use_sliding_window"):
        return f"{arch}: sliding-window attention (use_sliding_window) has no flag in slime's scripts: {_set_instead()}"
    if c.get("attention_bias") or c.get("mlp_bias"):
        return (f"{arch}: attention_bias/mlp_bias are on; Megatron's bias switches (--disable-bias-linear, "
                f"--add-qkv-bias) cannot express them as slime's scripts do: {_set_instead()}")
    if c["num_attention_heads"] % c["num_key_value_heads"]:
        return f"{arch}: {c['num_attention_heads']} attention heads do not split into {c['num_key_value_heads']} groups"
    if "head_dim" not in c and c["hidden_size"] % c["num_attention_heads"]:
        return (f"{arch}: hidden_size {c['hidden_size']} is not a multiple of {c['num_attention_heads']} heads "
                "(Megatron derives kv-channels from them, megatron/training/arguments.py:812-814)")
    theta = float(c["rope_theta"])
    if not theta.is_integer():
        return (f"{arch}: rope_theta {c['rope_theta']} is not whole; Megatron's --rotary-base is an int "
                "(megatron/training/arguments.py:1678)")
    scaling = c["rope_scaling"]
    if scaling is not None:
        wanted = {k: scaling.get(k) for k in MEGATRON_LLAMA3_SCALING}
        kind = scaling.get("rope_type", scaling.get("type"))
        if family != "llama" or kind != "llama3" or any(
                not isinstance(v, (int, float)) or not math.isclose(v, MEGATRON_LLAMA3_SCALING[k])
                for k, v in wanted.items()):
            return (f"{arch}: RoPE scaling {scaling} is not one slime's Megatron model applies: --use-rope-scaling "
                    f"is llama3 scaling with {MEGATRON_LLAMA3_SCALING} fixed (slime/backends/megatron_utils/"
                    "model_provider.py:200-214 passes no factor; megatron/core/models/common/embeddings/"
                    "rotary_pos_embedding.py:92-98), and --rotary-scaling-factor is read by MLA only: "
                    + _set_instead())
    return None


def _number(value: float) -> str:
    return repr(float(value))


def megatron_model_args(config: dict[str, Any]) -> list[str]:
    """The Megatron architecture flags slime's scripts/models/*.sh pass for the model ``config`` (a config.json
    dict), in the scripts' order; raises :class:`ModelArgsError` naming the architecture when it is not a dense
    qwen2, qwen3 or llama config this rule covers."""
    why = refusal(config)
    if why:
        raise ModelArgsError(why)
    family = config["model_type"]
    c = resolved(config)
    heads, groups = int(c["num_attention_heads"]), int(c["num_key_value_heads"])
    args = ["--swiglu",
            "--num-layers", str(int(c["num_hidden_layers"])),
            "--hidden-size", str(int(c["hidden_size"])),
            "--ffn-hidden-size", str(int(c["intermediate_size"])),
            "--num-attention-heads", str(heads)]
    if groups != heads:
        args += ["--group-query-attention", "--num-query-groups", str(groups)]
    if family == "llama":  # llama3.1-8B-Instruct.sh:9; the Qwen scripts leave it to slime's seq-length placeholder
        args += ["--max-position-embeddings", str(int(c["max_position_embeddings"]))]
    args += ["--use-rotary-position-embeddings", "--disable-bias-linear"]
    if family == "qwen2":
        args.append("--add-qkv-bias")
    args += ["--normalization", "RMSNorm",
             "--norm-epsilon", _number(c["rms_norm_eps"]),
             "--rotary-base", str(int(float(c["rope_theta"]))),
             "--vocab-size", str(int(c["vocab_size"]))]
    if "head_dim" in c:
        args += ["--kv-channels", str(int(c["head_dim"]))]
    if family == "qwen3":
        args.append("--qk-layernorm")
    if c["rope_scaling"] is not None:
        args.append("--use-rope-scaling")
    if not c["tie_word_embeddings"]:
        args.append("--untie-embeddings-and-output-weights")
    return args


# --- where the config comes from ------------------------------------------------------------------------------------


class ConfigUnavailable(ModelArgsError):
    """No config.json could be read for the model (not that its architecture is unsupported)."""


def builtin_config(name: str) -> dict[str, Any]:
    """The config.json of ``builtin:<name>``: the Qwen2 shape of unirl/data/builtin/tiny_model.py (SHAPES, the
    character tokenizer's vocabulary, tied embeddings, as :func:`~unirl.data.builtin.tiny_model.build` passes them to
    Qwen2Config) without building the model or importing transformers."""
    from unirl.data.builtin.tiny_model import SHAPES, vocabulary

    if name not in SHAPES:
        raise ConfigUnavailable(f"builtin:{name} is not a builtin model (known: {', '.join(sorted(SHAPES))})")
    return {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "tie_word_embeddings": True,
            "vocab_size": len(vocabulary(name)), **SHAPES[name]}


def hub_cached_config(repo_id: str) -> str | None:
    """The path of ``repo_id``'s config.json in the local Hugging Face cache, or None (never the network)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        found = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # a malformed id or cache: the same as not cached
        return None
    return found if isinstance(found, str) else None


def model_config(model_path: str, *, builtin_prefix: str, local: bool) -> tuple[dict[str, Any], str]:
    """(the config dict, where it came from) for a recipe's ``model.path``: a builtin model's shape, a local
    directory's config.json, or a hub id's config.json from the local Hugging Face cache."""
    if model_path.startswith(builtin_prefix):
        name = model_path[len(builtin_prefix):]
        return builtin_config(name), f"{model_path} (Qwen2 shape of unirl/data/builtin/tiny_model.py)"
    if local:
        path = Path(model_path).expanduser() / "config.json"
        where = f"{model_path.rstrip('/')}/config.json"
    else:
        cached = hub_cached_config(model_path)
        if cached is None:
            raise ConfigUnavailable(
                f"{model_path}'s config.json could not be read without the hub (it is not in the local Hugging Face "
                f"cache, and unirl plan never downloads): download the model (huggingface-cli download {model_path} "
                f"--local-dir DIR, then model.path=DIR), or {_set_instead()}")
        path, where = Path(cached), f"{cached} ({model_path} in the Hugging Face cache)"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigUnavailable(f"{where} does not exist on this machine, so the Megatron flags cannot be derived "
                                "(unirl plan reads the config here; a directory that exists only inside the image "
                                f"needs the flags given): point model.path at a Hugging Face model directory, or "
                                f"{_set_instead()}") from None
    except (OSError, ValueError) as exc:
        raise ConfigUnavailable(f"{where} could not be read ({exc}): {_set_instead()}") from None
    if not isinstance(config, dict):
        raise ConfigUnavailable(f"{where} is not a JSON object: {_set_instead()}")
    return config, where
