"""Build a tiny Qwen2-shaped model and a character-level tokenizer locally (no hub needed)."""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unirl.recipe.schema import BUILTIN_PREFIX

log = logging.getLogger(__name__)

SPECIALS = ["<pad>", "<bos>", "<eos>", "<unk>"]
# Arithmetic only: a small vocabulary lets a random policy hit digits often enough for RL to start.
CHARS = list("0123456789+-*=? ")
SHAPES: dict[str, dict[str, Any]] = {
    # 2 layers x 64 wide: ~125k parameters. rope_theta 1e6 (Qwen2.5's): with it RoPE turns most of a 16-wide head
    # slowly over a 5-token prompt, so attention leans on what a token is more than where it is, the bias the
    # held-out split asks for (a+b= with only b+a= in training); the fastest pair still rotates a radian a
    # position, so operand order stays visible to the model. Measured against 10000 (1 layer, 128 wide and other
    # shapes too) in the README's learning numbers.
    "tiny-arith": {"hidden_size": 64, "intermediate_size": 256, "num_hidden_layers": 2,
                   "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128,
                   "rope_theta": 1000000.0},
    # The same 64-wide attention in 2 heads of 32 (1 key-value head): vLLM's CPU build computes 32-wide heads, not
    # 16 (cpu_attn.py:69-70), so this is the model for runs whose rollouts vLLM generates on a CPU (TRL with
    # rollout.engine=vllm, verl's CPU mode). Its tokenizer also has Qwen's newline and end-of-turn tokens, which
    # verl's agent loop requires of every qwen2 model (verl/utils/tokenizer/continuous_token.py:554-559 @ 0.9.1).
    "tiny-arith-h32": {"hidden_size": 64, "intermediate_size": 256, "num_hidden_layers": 2,
                       "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 128,
                       "rope_theta": 1000000.0},
    # Qwen2.5-0.5B's shape (494M parameters with its 151,936-row embedding), randomly initialised:
    # for measuring a real model size on a GPU without a hub. Not expected to learn arithmetic quickly.
    "qwen2.5-0.5b-shape": {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
                           "num_attention_heads": 14, "num_key_value_heads": 2, "max_position_embeddings": 32768,
                           "vocab_size": 151936, "rope_theta": 1000000.0},
}
CHAT_TEMPLATE = "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}"
"""The messages' contents after <bos>: the same tokens as the raw text with the tokenizer's own <bos>, so that a prompt
is the same sequence whether a backend renders it with the chat template (verl always does; TRL with
data.chat_template=true) or tokenizes the text (TRL's default for a builtin model)."""
QWEN_TOKENS = ["\u010a", "<|im_end|>"]
"""Appended to the vocabulary of the shapes in :data:`WITH_QWEN_TOKENS` (after every other token, so the ids of the
rest are unchanged); never in the arithmetic data. transformers 5 loads the tokenizer of every qwen2 model directory as
Qwen2Tokenizer, whose byte-level pre-tokenizer turns a newline into the symbol "\u010a" ("Ċ"): that is the token
verl's agent loop finds for "\n"; "<|im_end|>" is Qwen's end of turn, which it also looks up."""
WITH_QWEN_TOKENS = frozenset({"tiny-arith-h32"})


def vocabulary(name: str | None = None) -> list[str]:
    """The tokenizer's tokens in id order for builtin ``name`` (None: the embedded default's)."""
    return SPECIALS + CHARS + (QWEN_TOKENS if name in WITH_QWEN_TOKENS else [])


NEVER_SAMPLED = [SPECIALS.index(t) for t in ("<pad>", "<bos>", "<unk>")]
"""Token ids the embedded default's model must never sample inside a completion, on every backend and engine."""


def never_sampled(model_path: str) -> list[int] | None:
    """The token ids a builtin ``model.path`` never samples inside a completion: pad, bos and unk, and the Qwen tokens
    of the shapes that have them (they are there for verl's lookups, not for the task; sampled, each tokenizer class
    decodes them its own way). None for a model that is not a builtin."""
    if not model_path.startswith(BUILTIN_PREFIX):
        return None
    vocab = vocabulary(model_path[len(BUILTIN_PREFIX):])
    return NEVER_SAMPLED + [vocab.index(t) for t in QWEN_TOKENS if t in vocab]


def allowed_token_ids(model_path: str) -> list[int] | None:
    """Every token id a builtin ``model.path`` may sample (for engines that take an allow-list); None for a model that
    is not a builtin."""
    never = never_sampled(model_path)
    if never is None:
        return None
    return [i for i in range(len(vocabulary(model_path[len(BUILTIN_PREFIX):]))) if i not in set(never)]


def build_tokenizer(name: str | None = None) -> Any:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(vocabulary(name))}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), "isolated")  # one token per character
    core.decoder = decoders.Fuse()
    core.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 1)])
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<bos>",  # type: ignore[no-untyped-call]
                                  eos_token="<eos>", unk_token="<unk>", padding_side="left")
    tok.chat_template = CHAT_TEMPLATE
    return tok


def build(name: str, seed: int) -> tuple[Any, Any]:
    """A randomly initialised model (seeded) and its tokenizer."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = build_tokenizer(name)
    shape = {"vocab_size": len(tok), **SHAPES[name]}
    config = Qwen2Config(tie_word_embeddings=True, pad_token_id=tok.pad_token_id,
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, **shape)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    return model, tok


def weights_hash(model: Any) -> str:
    """sha256 over parameter names, shapes and bytes: identifies the exact initial weights."""
    digest = hashlib.sha256()
    for key, tensor in sorted(model.state_dict().items()):
        digest.update(key.encode())
        digest.update(json.dumps(list(tensor.shape)).encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def save(name: str, seed: int, out_dir: Path) -> Path:
    """Write the model and tokenizer with save_pretrained, loadable by any transformers user."""
    model, tok = build(name, seed)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    return out_dir


@dataclass(frozen=True)
class UnknownCharacters:
    """What of a dataset's prompts the character tokenizer cannot represent (each such character is ``<unk>``)."""

    prompts: int
    """Prompts looked at."""
    affected: int
    """Prompts with at least one unknown character."""
    characters: Counter[str]
    """Each unknown character and how often it occurs."""
    first: int | None
    """Index of the first affected prompt."""
    example: str = ""
    """That prompt's text, cut short."""


def prompt_text(prompt: str | Sequence[Mapping[str, Any]]) -> str:
    """The text the tokenizer sees: a text prompt, or chat messages' contents as :data:`CHAT_TEMPLATE` joins them."""
    if isinstance(prompt, str):
        return prompt
    return "".join(str(m.get("content", "")) for m in prompt)


def unknown_characters(prompts: Iterable[str | Sequence[Mapping[str, Any]]]) -> UnknownCharacters:
    """Count the characters of ``prompts`` that the builtin tokenizer maps to ``<unk>`` (anything not in CHARS)."""
    known = frozenset(CHARS)
    counts: Counter[str] = Counter()
    total = affected = 0
    first: int | None = None
    example = ""
    for i, prompt in enumerate(prompts):
        text = prompt_text(prompt)
        total += 1
        unknown = [c for c in text if c not in known]
        if unknown:
            affected += 1
            counts.update(unknown)
            if first is None:
                first, example = i, text if len(text) <= 80 else text[:80] + "..."
    return UnknownCharacters(total, affected, counts, first, example)


_WARNED: set[tuple[str, str]] = set()


def warn_unknown_characters(model_path: str, source: str, prompts: Iterable[str | Sequence[Mapping[str, Any]]]
                            ) -> UnknownCharacters | None:
    """When ``model_path`` is a builtin model and ``source``'s prompts hold characters its tokenizer does not know:
    one warning (on the ``unirl`` logger) naming the dataset, how many prompts and characters are affected and an
    example, once per process for each model and dataset. Returns what was found (None for other models)."""
    if not model_path.startswith("builtin:"):
        return None
    found = unknown_characters(prompts)
    if not found.affected or (model_path, source) in _WARNED:
        return found
    _WARNED.add((model_path, source))
    shown = ", ".join(repr(c) for c, _ in found.characters.most_common(8))
    log.warning("%s: %d of %d prompts hold characters the %s tokenizer does not know, which become <unk> "
                "(%d distinct, %d occurrences; most frequent: %s); e.g. prompt %d: %r. Its character-level "
                "vocabulary is only %r: for text like this, use a real model (model.path=<hub id or directory>)",
                source, found.affected, found.prompts, model_path, len(found.characters),
                sum(found.characters.values()), shown, found.first, found.example, "".join(CHARS))
    return found


def head_size(path: str) -> int | None:
    """The attention head size of ``model.path``: a builtin's shape, or a local directory's config.json; None where it
    cannot be read here (a hub id, an unreadable config)."""
    if path.startswith("builtin:"):
        shape = SHAPES.get(path[len("builtin:"):])
        return None if shape is None else int(shape["hidden_size"]) // int(shape["num_attention_heads"])
    config = Path(path).expanduser() / "config.json"
    try:
        loaded = json.loads(config.read_text(encoding="utf-8"))
        return int(loaded.get("head_dim") or loaded["hidden_size"] // loaded["num_attention_heads"])
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError):
        return None
