"""The launcher NeMo RL needs for a custom reward: register unirl's environment, then run ``examples/run_grpo.py``.

Runs in NeMo RL's own interpreter (its image or venv), with unirl's light core on PYTHONPATH::

    python -m unirl.plugins.nemo_rl.launch --repo /opt/nemo-rl --config examples/configs/grpo_math_1B.yaml <overrides>

``examples/run_grpo.py`` never calls ``register_env``, and ``setup_response_data`` creates every environment a
dataset names from the module-level ``ENV_REGISTRY`` (nemo_rl/data/utils.py:151-160, nemo_rl/environments/utils.py:
106-111 @ v0.7.0). So the registration has to happen in the driver process before the script runs: this module
registers the ``unirl`` environment, then executes the repository's own script unchanged with ``runpy``, as
``__main__``, with the argv its ``parse_known_args`` expects and the repository as the working directory (NeMo RL
resolves its prompt files and config ``defaults:`` relative to it). No NeMo RL code is copied here.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
from pathlib import Path

GRPO_SCRIPT = "examples/run_grpo.py"
LEGACY_SCRIPT = "examples/run_grpo_math.py"
BASE_CONFIG = "examples/configs/grpo_math_1B.yaml"


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(prog="python -m unirl.plugins.nemo_rl.launch", description=__doc__.splitlines()[0],
                                     allow_abbrev=False)
    parser.add_argument("--repo", type=Path, required=True, help="NeMo RL's repository (its checkout or image path)")
    parser.add_argument("--config", default=BASE_CONFIG, help="base config, relative to --repo or absolute")
    return parser.parse_known_args(argv)


def export_core_path() -> None:
    """Put the directory unirl was imported from on PYTHONPATH for the Ray actors NeMo RL starts.

    ``create_env`` hands the driver's ``os.environ`` to the environment actor (nemo_rl/environments/utils.py:124-129
    @ v0.7.0), and the actor imports ``unirl.adapters.nemo_rl`` by name, so ``sys.path`` alone is not enough."""
    import unirl

    core = str(Path(unirl.__file__).resolve().parent.parent)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if core not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([core, *paths])


def find_script(repo: Path) -> Path:
    script = repo / GRPO_SCRIPT
    if script.is_file():
        return script
    if (repo / LEGACY_SCRIPT).is_file():
        raise SystemExit(f"{repo} is a NeMo RL release older than 0.5 ({LEGACY_SCRIPT}, no {GRPO_SCRIPT}); "
                         "unirl translates for NeMo RL 0.7: use the nvcr.io/nvidia/nemo-rl:v0.7.0 image or that tag")
    raise SystemExit(f"no {GRPO_SCRIPT} under --repo {repo}: point framework.repo at a NeMo RL checkout")


def main(argv: list[str] | None = None) -> None:
    args, overrides = parse_args(argv)
    repo = args.repo.expanduser().resolve()
    script = find_script(repo)
    export_core_path()

    from unirl.adapters.nemo_rl import register

    register()  # before the script: it builds its environments from the registry in setup_response_data

    os.chdir(repo)
    # What `python examples/run_grpo.py --config ... <overrides>` would see: its argv and its folder on sys.path.
    sys.argv = [str(script), "--config", args.config, *overrides]
    sys.path.insert(0, str(script.parent))
    runpy.run_path(str(script), run_name="__main__")


if __name__ == "__main__":
    main()
