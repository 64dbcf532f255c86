"""Backend versions: PEP 440 gates, and what a version that is not a release number (a git commit, a local build)
means for a plan: the tested version's tables, said in the plan's notes."""

from __future__ import annotations

import pytest

from tests.support.backend_recipes import gpu_recipe
from unirl.errors import RecipeInvalid
from unirl.plugins.nemo_rl.framework import NemoRlFramework
from unirl.plugins.openrlhf.framework import OpenRlhfFramework
from unirl.plugins.verl.framework import VerlFramework
from unirl.versions import matches, release, tables_version


@pytest.fixture(autouse=True)
def no_backend_interpreters(monkeypatch: pytest.MonkeyPatch) -> None:
    """framework.version is what these tests translate for: no installed backend may be found instead."""
    for name in ("VERL", "OPENRLHF", "NEMO_RL"):
        monkeypatch.delenv(f"UNIRL_{name}_PYTHON", raising=False)


@pytest.mark.parametrize(("version", "gate", "expected"), [
    ("0.10.0rc1", ">=0.10", False),  # a release candidate comes before its release
    ("0.10.0rc1", ">=0.9,<0.10", False),  # ... and is not the old series either: PEP 440 excludes it from <0.10
    ("0.11.0rc1", ">=0.10.2,<0.12", True),  # inside a range, a pre-release counts
    ("0.9.2.dev0+g1234abc", ">=0.9,<0.10", True),  # an editable install from a git checkout
    ("0.9.1+cu124", ">=0.9,<0.10", True),  # a local build is its public version
    ("v0.9.1", ">=0.9", True),
    ("0.10.0", ">=0.9,<0.10", False),
    ("0.9.1", "", True),
])
def test_gates_follow_pep_440(version: str, gate: str, expected: bool) -> None:
    assert matches(version, gate) is expected


@pytest.mark.parametrize("commit", ["9f3e1d2", "7ea279a", "1234567", "624b824a898a"])
def test_a_git_commit_is_not_a_release_and_is_never_compared_as_one(commit: str) -> None:
    assert release(commit) is None  # "9f3e1d2" once read as 9 >= 0.9; "1234567" would parse as release 1234567
    with pytest.raises(ValueError, match="not a release number"):
        matches(commit, ">=0.9")
    assert matches(commit, "")  # no gate: nothing to compare


def test_what_tables_a_version_translates_with() -> None:
    assert tables_version("0.9.1", "0.9.1") == ("0.9.1", None)
    public, note = tables_version("0.9.1+cu124", "0.9.1")
    assert public == "0.9.1" and note == "0.9.1+cu124 is a local build of 0.9.1: translated as 0.9.1"
    tables, note = tables_version("7ea279a", "0.7.0")
    assert tables == "0.7.0" and note is not None and "7ea279a is not a release number" in note
    assert tables_version("624b824a898a", "624b824a898a") == ("624b824a898a", None)  # slime's tested commit


def test_a_malformed_gate_is_an_error_naming_it() -> None:
    with pytest.raises(ValueError, match=r"version gate '>=0\.9;<1' is not a PEP 440 specifier set"):
        matches("0.9.1", ">=0.9;<1")


def test_a_git_checkout_of_nemo_rl_is_translated_with_the_tested_tables_and_the_plan_says_so() -> None:
    recipe = gpu_recipe("nemo_rl", options={"version": "7ea279a"}, data={"eval": None},
                        algorithm={"max_new_tokens": 16})  # below the builtin model's 128-token context
    plan = NemoRlFramework().plan(recipe)
    assert plan.target_version == "7ea279a"
    assert any("7ea279a is not a release number" in n and "tested version 0.7.0" in n for n in plan.notes)
    NemoRlFramework().validate(plan)  # checked against 0.7.0's key schema, not refused for lack of one


def test_a_release_candidate_of_the_next_verl_minor_is_refused_and_one_of_this_minor_is_not() -> None:
    with pytest.raises(RecipeInvalid, match=r"framework\.version='0\.10\.0rc1': not supported by verl; verl "
                                            r"supports versions >=0\.9,<0\.10"):
        VerlFramework().plan(gpu_recipe("verl", options={"version": "0.10.0rc1"}))
    plan = VerlFramework().plan(gpu_recipe("verl", options={"version": "0.9.2rc1"}))
    assert plan.native_config["overrides"]["reward.custom_reward_function.path"] == "pkg://unirl.adapters.verl"


def test_a_local_build_of_openrlhf_uses_its_public_versions_parser() -> None:
    framework = OpenRlhfFramework()
    plan = framework.plan(gpu_recipe("openrlhf", options={"version": "0.11.2+cu124"}))
    assert "--rollout.n_samples_per_prompt" in plan.command  # rendered from the 0.11.2 snapshot
    assert "0.11.2+cu124 is a local build of 0.11.2: translated as 0.11.2" in plan.notes
    assert framework.schema_problems(plan) == []
