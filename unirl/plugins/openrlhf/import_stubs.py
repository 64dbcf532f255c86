"""Import stubs for the GPU-only packages OpenRLHF's CPU-testable code imports at module level, installed only where
the package is absent (this machine: no CUDA, so neither vLLM nor flash-attn installs).

- **vLLM**: ``openrlhf/trainer/ray/__init__.py:2`` imports ``vllm_engine``, which imports ``vllm``,
  ``vllm.inputs.TokensPrompt`` and ``vllm.utils.random_uuid`` (vllm_engine.py:7-12); ``samples_generator.py:7``
  imports ``vllm.SamplingParams``. The experience maker, the samples generator's response processing and the agent
  executor never call them.
- **flash-attn**: ``openrlhf/models/ring_attn_utils.py:3-4`` imports ``flash_attn.bert_padding`` and
  ``flash_attn.utils.distributed.all_gather``, which
  ``openrlhf/models/__init__.py`` pulls in for every ``openrlhf.models`` import (the loss functions included); only
  ring attention and padding-free training call it.

Each stub is a plain module whose names raise when used, so no code path can silently run on a fake. No OpenRLHF
code is stubbed or patched. :func:`install` returns which packages it stubbed, for the caller to report.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import types
from typing import Any


def _unavailable(package: str, name: str) -> Any:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{package}.{name} is an import stub (unirl/plugins/openrlhf/import_stubs.py): {package} "
                           "is not installed")

    return type(name, (), {"__init__": refuse, "__call__": refuse}) if name[0].isupper() else refuse


def install() -> list[str]:
    """Stub vLLM and flash-attn where they are not installed; the names of those stubbed."""
    stubbed = []
    if importlib.util.find_spec("vllm") is None:
        vllm = types.ModuleType("vllm")
        vllm.__spec__ = importlib.machinery.ModuleSpec("vllm", None)
        vllm.__version__ = "0.0.0+unirl-import-stub"  # type: ignore[attr-defined]
        vllm.SamplingParams = _unavailable("vllm", "SamplingParams")  # type: ignore[attr-defined]
        inputs = types.ModuleType("vllm.inputs")
        inputs.TokensPrompt = _unavailable("vllm.inputs", "TokensPrompt")  # type: ignore[attr-defined]
        utils = types.ModuleType("vllm.utils")
        utils.random_uuid = _unavailable("vllm.utils", "random_uuid")  # type: ignore[attr-defined]
        vllm.inputs, vllm.utils = inputs, utils  # type: ignore[attr-defined]
        sys.modules.update({"vllm": vllm, "vllm.inputs": inputs, "vllm.utils": utils})
        stubbed.append("vllm")
    if importlib.util.find_spec("flash_attn") is None:
        names = {"flash_attn.bert_padding": ("index_first_axis", "pad_input", "rearrange", "unpad_input"),
                 "flash_attn.utils.distributed": ("all_gather",)}
        modules = {}
        for full in ("flash_attn", "flash_attn.utils", *names):
            module = types.ModuleType(full)
            # a spec, so that transformers' find_spec probe reads it as a package without a distribution (absent)
            module.__spec__ = importlib.machinery.ModuleSpec(full, None, is_package=True)
            module.__path__ = []
            for name in names.get(full, ()):
                setattr(module, name, _unavailable(full, name))
            modules[full] = module
        for full, module in modules.items():
            parent, _, child = full.rpartition(".")
            if parent:
                setattr(modules[parent], child, module)
        sys.modules.update(modules)
        stubbed.append("flash_attn")
    return stubbed
