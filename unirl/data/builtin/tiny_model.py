"""Build a tiny Qwen2-shaped model and a character-level tokenizer locally (no hub needed)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

SPECIALS = ["<pad>", "<bos>", "<eos>", "<unk>"]
# Arithmetic only: a small vocabulary lets a random policy hit digits often enough for RL to start.
CHARS = list("0123456789+-*=? ")
SHAPES: dict[str, dict[str, Any]] = {
    # 2 layers x 64 wide: ~125k parameters, learns single-digit addition by RL in ~2 CPU minutes.
    "tiny-arith": {"hidden_size": 64, "intermediate_size": 256, "num_hidden_layers": 2,
                   "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128},
    # Qwen2.5-0.5B's shape (494M parameters with its 151,936-row embedding), randomly initialised:
    # for measuring a real model size on a GPU without a hub. Not expected to learn arithmetic quickly.
    "qwen2.5-0.5b-shape": {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
                           "num_attention_heads": 14, "num_key_value_heads": 2, "max_position_embeddings": 32768,
                           "vocab_size": 151936, "rope_theta": 1000000.0},
}
CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


def build_tokenizer() -> Any:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIALS + CHARS)}
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

    tok = build_tokenizer()
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
