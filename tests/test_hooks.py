"""The plugin host: registrars, built-ins as ordinary plugins, blocking, local plugin files, listing."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import ClassVar

import pytest

import unirl
from tests.helpers import run_cli
from unirl.backend.contract import Capabilities
from unirl.errors import UnirlError, UnknownName
from unirl.host.manager import build_host
from unirl.host.registry import Registry


class ToyFramework:
    name = "toy"
    description = "a third-party backend"
    capabilities = Capabilities(algorithms=("grpo",), rollout_engines=("hf",), placement=("colocated",),
                                modes=("sync",), training_backends=("none",), multi_node="no",
                                custom_reward="none", runs_on_cpu=True)
    options: ClassVar[dict[str, str]] = {"name": "toy"}

    def installed_version(self) -> str | None:
        return "0.0.1"


class ToyPlugin:
    @unirl.hookimpl
    def unirl_add_frameworks(self, registry: Registry) -> None:
        registry.add(ToyFramework())


def test_builtins_register_through_the_same_entry_point_group_as_third_parties() -> None:
    host = build_host()
    assert "trl" in host.frameworks.names()
    assert "local" in host.schedulers.names()
    assert {"math_answer", "bare_number"} <= set(host.rewards.names())
    assert {"hf", "vllm", "sglang"} <= set(host.rollout_engines.names())
    by_name = {p.name: p for p in host.plugins()}
    assert by_name["trl"].distribution == "unirl"
    assert by_name["trl"].hooks == ["unirl_add_frameworks"]
    assert host.frameworks.entry("trl").source == "trl"


def test_a_plugin_adds_a_framework_in_one_line_and_is_listed_with_its_hooks() -> None:
    host = build_host(extra_plugins=[ToyPlugin()])
    assert host.frameworks.get("toy").installed_version() == "0.0.1"
    assert "trl" in host.frameworks.names()


def test_registering_a_name_twice_is_an_error_naming_both_plugins() -> None:
    class Clash:
        @unirl.hookimpl
        def unirl_add_frameworks(self, registry: Registry) -> None:
            registry.add(ToyFramework())
            registry.add(ToyFramework())

    with pytest.raises(UnirlError, match="registered twice"):
        build_host(extra_plugins=[Clash()])


def test_lazy_entries_import_nothing_until_used() -> None:
    sys.modules.pop("unirl.plugins.builtin_rewards.math_answer", None)
    host = build_host()
    assert not host.rewards.entry("math_answer").loaded
    assert "unirl.plugins.builtin_rewards.math_answer" not in sys.modules
    assert host.rewards.get("math_answer").name == "math_answer"
    assert host.rewards.entry("math_answer").loaded


def test_block_env_var_removes_a_builtin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UNIRL_PLUGINS_BLOCK", "trl")
    host = build_host()
    assert "trl" not in host.frameworks.names()
    assert "trl" in host.blocked()
    with pytest.raises(UnknownName, match=r"installed frameworks: (?!.*\btrl\b)"):
        host.frameworks.get("trl")


LOCAL_PLUGIN = '''
import unirl

@unirl.hookimpl
def unirl_add_rewards(registry):
    registry.add(shout)

@unirl.reward("shout")
def shout(sample):
    """1.0 when the completion is upper case."""
    return 1.0 if sample.completion.isupper() else 0.0
'''


def test_project_local_plugin_file_is_loaded_and_can_be_blocked(isolated: Path) -> None:
    (isolated / "unirlfile.py").write_text(LOCAL_PLUGIN)
    host = build_host()
    assert "shout" in host.rewards.names()
    assert host.rewards.entry("shout").source == "local:unirlfile.py"
    listed = run_cli("rewards", "--json", cwd=isolated)
    assert "shout" in [r["name"] for r in json.loads(listed.stdout)]
    blocked = run_cli("rewards", "--json", cwd=isolated, env={"UNIRL_PLUGINS_BLOCK": "local:unirlfile.py"})
    assert "shout" not in [r["name"] for r in json.loads(blocked.stdout)]


def test_autoload_switch_keeps_builtins_and_loads_only_named_third_party(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UNIRL_DISABLE_PLUGIN_AUTOLOAD", "1")
    host = build_host()
    assert "trl" in host.frameworks.names()  # unirl's own built-ins always load


def test_lifecycle_hooks_reach_every_plugin(tmp_path: Path) -> None:
    seen: list[tuple[str, int]] = []

    class Sink:
        @unirl.hookimpl
        def unirl_metrics(self, step: int, metrics: dict) -> None:  # a subset of the hook's arguments
            seen.append(("metrics", step))

    host = build_host(extra_plugins=[Sink()])
    from unirl.record.layout import RunInfo

    run = RunInfo(run_dir=tmp_path, framework="trl", recipe={"logging": {"progress": False}})
    host.pm.hook.unirl_metrics(run=run, step=3, metrics={"reward/total/mean": 0.5})
    assert seen == [("metrics", 3)]
    assert json.loads((tmp_path / "metrics.jsonl").read_text()) == {"step": 3, "reward/total/mean": 0.5}


def test_unirl_plugins_lists_distribution_version_and_hooks() -> None:
    out = run_cli("plugins", "--json")
    assert out.returncode == 0, out.stderr
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    assert rows["trl"]["distribution"] == "unirl"
    assert rows["trl"]["version"] == unirl.__version__
    assert "unirl_add_frameworks" in rows["trl"]["hooks"]
    assert "unirl_rollouts_scored" in rows["recorder"]["hooks"]
