"""The plugin host: registrars, built-ins as ordinary plugins, blocking, local plugin files, listing; how hooks are
called (each plugin on its own through pluggy's call loop, traced on request, wrappers refused, a failing
lifecycle plugin skipped); registries that enforce their protocol; the configuration and rollout-engine hooks; a
recipe's reward file as a plugin."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

import unirl
from tests.support.cli import run_cli
from unirl.backend.contract import Capabilities, RunInputs
from unirl.backend.plan import LaunchPlan
from unirl.backend.rollout import RolloutEngine
from unirl.errors import FieldError, RecipeInvalid, UnirlError, UnknownName
from unirl.host.manager import build_host
from unirl.host.planning import check, compose
from unirl.host.registry import Registry
from unirl.launch.scheduler import JobResult, SchedulerBase
from unirl.recipe.compose import to_recipe
from unirl.recipe.schema import Recipe
from unirl.record.layout import RunInfo
from unirl.rewards.contract import Sample


class ToyFramework:
    name = "toy"
    description = "a third-party backend"
    capabilities = Capabilities(algorithms=("grpo",), rollout_engines=("hf",), placement=("colocated",),
                                modes=("sync",), training_backends=("none",), multi_node="no",
                                custom_reward="none", runs_on_cpu=True)
    mapping = ()
    options: ClassVar[dict[str, str]] = {"name": "toy"}

    def installed_version(self, python: str | None = None) -> str | None:
        return "0.0.1"

    def plan(self, recipe: Recipe) -> LaunchPlan:
        raise NotImplementedError

    def validate(self, plan: LaunchPlan) -> None:
        raise NotImplementedError

    def require_resumable(self, run_dir: Path) -> None:
        pass

    def prepare(self, plan: LaunchPlan, run_dir: Path, inputs: RunInputs) -> LaunchPlan:
        raise NotImplementedError


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
    plugin = ToyPlugin()
    host = build_host(extra_plugins=[plugin])
    assert host.frameworks.get("toy").installed_version() == "0.0.1"
    assert "trl" in host.frameworks.names()
    assert host.frameworks.entry("toy").source == host.pm.get_name(plugin)


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
    run = RunInfo(run_dir=tmp_path, framework="trl", recipe={"logging": {"progress": False}})
    host.run_recorder(run).metrics(3, {"reward/total/mean": 0.5})
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


# --- how hooks are called ---------------------------------------------------------------------------------------


def test_each_entry_remembers_its_plugin_and_pluggys_order_holds() -> None:
    """Registrars are called plugin by plugin in pluggy's own order: a trylast plugin replaces on purpose, and the
    entry then names it, not the plugin that first registered the name."""

    class Replacer:
        @unirl.hookimpl(trylast=True)
        def unirl_add_frameworks(self, registry: Registry) -> None:
            registry.add(ToyFramework(), replace=True)

    first, replacer = ToyPlugin(), Replacer()
    host = build_host(extra_plugins=[replacer, first])  # registered first, called last: trylast, not the order
    assert host.frameworks.entry("toy").source == host.pm.get_name(replacer)
    assert host.frameworks.entry("trl").source == "trl"


def test_the_trace_variable_shows_every_hook_call_with_its_plugin(tmp_path: Path) -> None:
    out = run_cli("plugins", "--json", env={"UNIRL_TRACE_PLUGINS": "1"})
    assert out.returncode == 0, out.stderr
    assert "unirl trace: unirl_add_frameworks -> verl (registry=<framework registry for 'verl'>)" in out.stderr
    assert "unirl trace: unirl_add_rewards -> rewards (registry=<reward registry for 'rewards'>)" in out.stderr
    assert "unirl trace: unirl_add_configs" not in out.stderr  # `unirl plugins` composes nothing
    json.loads(out.stdout)  # the listing itself is untouched


def test_a_wrapper_implementation_is_refused_naming_its_plugin(isolated: Path) -> None:
    class Wrapping:
        @unirl.hookimpl(wrapper=True)
        def unirl_metrics(self, metrics: dict[str, float]) -> Iterator[None]:
            yield

    with pytest.raises(UnirlError, match=r"plugin '.+' implements unirl_metrics as a wrapper.*tryfirst=True"):
        build_host(extra_plugins=[Wrapping()])
    (isolated / "unirlfile.py").write_text(
        "import unirl\n\n@unirl.hookimpl(hookwrapper=True)\ndef unirl_add_rewards(registry):\n    yield\n")
    out = run_cli("plugins", cwd=isolated)
    assert out.returncode == 2
    assert "plugin 'local:unirlfile.py' implements unirl_add_rewards as a wrapper" in out.stderr


def test_a_lifecycle_plugin_that_raises_is_reported_once_and_the_others_still_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[int] = []

    class Broken:
        @unirl.hookimpl(tryfirst=True)
        def unirl_metrics(self, step: int) -> None:
            raise RuntimeError("the tracker's server is down")

    class Sink:
        @unirl.hookimpl
        def unirl_metrics(self, step: int) -> None:
            seen.append(step)

    broken = Broken()
    host = build_host(extra_plugins=[Sink(), broken])
    recorder = host.run_recorder(RunInfo(tmp_path, "trl", {"logging": {"progress": False, "plot": False}}))
    recorder.metrics(1, {"reward/total/mean": 0.25})
    recorder.metrics(2, {"reward/total/mean": 0.5})
    summary: dict[str, Any] = {"state": "completed"}
    recorder.run_end(summary)
    err = capsys.readouterr().err
    assert seen == [1, 2]  # the plugin after the broken one
    assert [m["step"] for m in map(json.loads, (tmp_path / "metrics.jsonl").read_text().splitlines())] == [1, 2]
    assert err.count("raised in unirl_metrics") == 1 and "RuntimeError: the tracker's server is down" in err
    key = f"{host.pm.get_name(broken)}:unirl_metrics"
    assert json.loads((tmp_path / "summary.json").read_text())["plugin_errors"] == {key: 2}


# --- registries enforce their protocol ---------------------------------------------------------------------------


def test_a_component_that_is_not_what_its_registry_holds_is_refused_naming_the_plugin() -> None:
    class HalfFramework:
        name = "half"
        description = "no plan, no launch"

    class Framer:
        @unirl.hookimpl
        def unirl_add_frameworks(self, registry: Registry) -> None:
            registry.add(HalfFramework())

    framer = Framer()
    with pytest.raises(UnirlError) as refused:
        build_host(extra_plugins=[framer])
    assert str(refused.value) == (
        f"plugin {build_host_name(framer)!r} registered framework 'half', which is not a framework: it lacks "
        "capabilities, installed_version, mapping, options, plan, prepare, require_resumable, validate "
        "(see unirl.backend.contract.Framework)")


def build_host_name(plugin: object) -> str:
    """The name pluggy gives an unnamed plugin object (what the host's messages call it)."""
    return str(id(plugin))


class BareScheduler:
    name = "bare"
    description = "submit and stop only"
    options: ClassVar[dict[str, Any]] = {"name": "bare"}

    def submit(self, plan: LaunchPlan, run_dir: Path, options: dict[str, Any]) -> JobResult:
        return JobResult("completed", 0)

    def stop(self, record: dict[str, Any]) -> str:
        return "nothing to stop"


class BasedScheduler(SchedulerBase, BareScheduler):
    name = "based"


def test_optional_scheduler_methods_come_from_the_base_class_not_from_probing() -> None:
    class Bare:
        @unirl.hookimpl
        def unirl_add_schedulers(self, registry: Registry) -> None:
            registry.add(BareScheduler())

    class Based:
        @unirl.hookimpl
        def unirl_add_schedulers(self, registry: Registry) -> None:
            registry.add(BasedScheduler())

    with pytest.raises(UnirlError, match=r"scheduler 'bare', which is not a scheduler: it lacks active, check, "
                                         r"check_plan \(subclass unirl.launch.scheduler.SchedulerBase\)"):
        build_host(extra_plugins=[Bare()])
    based = build_host(extra_plugins=[Based()]).schedulers.get("based")
    based.check({})  # accepts every job
    assert based.active({"job_id": "1"}) is None  # cannot tell


def test_a_lazy_entry_is_checked_when_it_loads() -> None:
    class Lazy:
        @unirl.hookimpl
        def unirl_add_rewards(self, registry: Registry) -> None:
            registry.add("json:dumps", name="not_a_reward")

    lazy = Lazy()
    host = build_host(extra_plugins=[lazy])  # nothing imported yet, nothing to check
    with pytest.raises(UnirlError, match=rf"plugin '{build_host_name(lazy)}' registered the lazy reward "
                                         r"'not_a_reward' \(json:dumps\), which is not a reward: it is a function, "
                                         r"not a RewardFunction \(make it with the @unirl.reward decorator\)"):
        host.rewards.get("not_a_reward")


# --- hooks that lead somewhere -------------------------------------------------------------------------------------


def test_a_rollout_engine_a_plugin_registers_is_a_choice_for_recipes() -> None:
    class Engines:
        @unirl.hookimpl
        def unirl_add_rollout_engines(self, registry: Registry) -> None:
            registry.add(RolloutEngine("toygen", "a third party's generation server", needs_gpu=False))

    with_engine = build_host(extra_plugins=[Engines()])
    recipe = to_recipe(compose(with_engine, ["rollout.engine=toygen"]))
    check(with_engine, recipe)  # the recipe is valid; which framework drives it is the framework's question
    with pytest.raises(RecipeInvalid, match=r"rollout.engine='toygen'"):
        check(build_host(), recipe)


def test_plugins_store_config_groups_through_the_configs_hook() -> None:
    """unirl's own framework and scheduler options arrive through ``unirl_add_configs`` like a third party's
    recipe pack does."""

    class RecipePack:
        @unirl.hookimpl
        def unirl_add_configs(self, config_store: Any) -> None:
            config_store.store(group="recipe", name="pack_short", node={"algorithm": {"steps": 7}},
                               package="_global_")

    host = build_host(extra_plugins=[RecipePack()])
    assert {p.name: p for p in host.plugins()}["config_groups"].hooks == ["unirl_add_configs"]
    recipe = to_recipe(compose(host, ["recipe=pack_short", "framework=verl", "scheduler=ray"]))
    assert recipe.algorithm.steps == 7
    assert recipe.framework["name"] == "verl" and "python" in recipe.framework  # verl's own options node
    assert recipe.scheduler["name"] == "ray" and "address" in recipe.scheduler


OVERRIDING_FILE = """
import unirl

@unirl.hookimpl
def unirl_add_rewards(registry):
    registry.add(strict_math, replace=True)  # on purpose: this project's own math_answer

@unirl.reward("math_answer")
def strict_math(sample):
    return 1.0 if sample.completion.strip() == sample.reference else 0.0

@unirl.reward("terse")
def terse(sample):
    return 1.0 if len(sample.completion) < 5 else 0.0
"""


def test_a_reward_file_named_by_a_recipe_is_a_plugin_whose_hook_runs(isolated: Path) -> None:
    (isolated / "r.py").write_text(OVERRIDING_FILE)
    host = build_host()
    check(host, to_recipe(compose(host, ["rewards=[{name:math_answer,file:./r.py},{name:terse}]"])))
    plugin = f"reward_file:{(isolated / 'r.py').resolve()}"
    reward = host.rewards.get("math_answer")
    assert host.rewards.entry("math_answer").source == plugin  # its hook ran: the built-in is replaced
    assert reward(Sample(prompt="", completion="  7 ", reference="7")).score == 1.0
    assert reward(Sample(prompt="", completion="x=7", reference="7")).score == 0.0  # the built-in would say 1.0
    assert host.rewards.entry("terse").source == plugin  # decorated only: added, attributed to the file
    info = {p.name: p for p in host.plugins()}[plugin]
    assert (info.distribution, info.version, info.hooks) == ("reward file", plugin.removeprefix("reward_file:"),
                                                             ["unirl_add_rewards"])


COLLIDING = {
    "reward": ('import unirl\n\n@unirl.reward("math_answer")\ndef mine(sample):\n    return 1.0\n',
               "rewards=[{name:math_answer,file:./c.py}]", "rewards[0].file", "reward 'math_answer'"),
    "environment": ('import unirl\n\n@unirl.environment("lookup")\nclass Mine(unirl.Environment):\n'
                    '    def reset(self, task):\n        return "x"\n'
                    '    def step(self, action):\n        return unirl.Step(done=True)\n',
                    "environment.file=./c.py", "environment.file", "environment 'lookup'"),
}


@pytest.mark.parametrize("kind", sorted(COLLIDING))
def test_a_file_decorating_a_taken_name_is_refused_instead_of_silently_running_the_other(kind: str,
                                                                                          isolated: Path) -> None:
    """Without a hook that replaces it on purpose (replace=True), a decorated reward or environment whose name is
    registered already would be skipped and the built-in would run in its place: a different experiment."""
    source, override, field, what = COLLIDING[kind]
    (isolated / "c.py").write_text(source)
    host = build_host()
    extra = ["recipe=grpo_tool"] if kind == "environment" else []
    with pytest.raises((RecipeInvalid, FieldError)) as caught:  # one field, or one problem of the recipe's
        check(host, to_recipe(compose(host, [*extra, override])))
    message = str(caught.value)
    assert f"{field}=" in message and f"{what} from 'reward_file:" in message and "give it another name" in message
