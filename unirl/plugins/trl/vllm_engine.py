"""TRL's colocated vLLM engine: what unirl's TRL runner sets up for it.

- :func:`engine_loadable`: the engine loads the model from a directory, so a builtin model (built in memory) gets one.
- :func:`private_rendezvous`: a single-process run's own port for the process group the engine joins.
- :func:`keep_weights_loadable`, on CPU only (vLLM's CPU build): vLLM 0.32 repacks each linear layer's weight for
  oneDNN when it loads the model and replaces the layer's ``weight`` with an empty ``Parameter`` that has no
  ``weight_loader`` (vllm/model_executor/layers/utils.py:580-593, ``remove_weight``). TRL syncs the trained weights
  into the engine through ``load_weights`` after every step, which calls each parameter's ``weight_loader``: the
  first sync fails with ``'Parameter' object has no attribute 'weight_loader'``. With oneDNN packing off, vLLM keeps
  the weights as plain parameters and computes linears with ``torch.nn.functional.linear`` (the fallback the same
  function takes), so TRL's sync reaches them. It must run before the engine is built (GRPOTrainer.__init__ builds
  it). vLLM's ``reload_weights`` is not a substitute: with a tied ``lm_head`` it leaves stale weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def keep_weights_loadable() -> None:
    """Turn vLLM's oneDNN weight packing off for the engines this process builds from now on."""
    import vllm._custom_ops as ops

    ops._supports_onednn = False


ENGINE_MODEL_DIR = "engine_model"
"""Where a model built in memory (a builtin) is written for the engine: TRL's colocated vLLM loads the model from
``model.name_or_path`` (trl/generation/vllm_generation.py:347) before syncing the trained weights into it."""


def engine_loadable(model: Any, tok: Any, run_dir: Path) -> None:
    """Give a model that has no directory (a builtin, built in memory) one in the run directory, with its tokenizer,
    so that the engine can load it; a hub id or a local directory is left as it is."""
    if model.name_or_path and (Path(model.name_or_path).is_dir() or not model.name_or_path.startswith(("/", "."))):
        return
    where = run_dir / ENGINE_MODEL_DIR
    model.save_pretrained(where)
    tok.save_pretrained(where)
    model.config._name_or_path = str(where)
    model.name_or_path = str(where)  # transformers 5 keeps it on the model too, and TRL reads that one


TRL_PROBED_PORTS = frozenset({"29500", "23456", "12355", "12345"})
"""The ports TRL's ensure_master_addr_port tries in order (trl/trainer/utils.py:97-104)."""


def private_rendezvous(ranks_world: int) -> None:
    """A rendezvous port of this run's own for the process group a colocated vLLM engine joins, in a run of one
    process (torchrun sets MASTER_ADDR/MASTER_PORT for several). Left unset, TRL probes a fixed list (29500, 23456,
    12355, 12345: trl/trainer/utils.py:97-104) and accelerate falls back to 29500, so a second run, or a torchrun job
    on the same machine, makes this one fail with EADDRINUSE. The kernel hands out a free ephemeral port instead."""
    import os
    import socket

    if ranks_world > 1:
        return
    given = os.environ.get("MASTER_PORT", "").strip()
    if given and given not in TRL_PROBED_PORTS:
        return  # the user's own port; one of TRL's list is what its probe set earlier in this process (validation)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
