"""slime's and vime's Megatron architecture flags, derived from a model's config.json.

Each fixture under tests/fixtures/slime_models/ holds one of slime's scripts/models/*.sh (THUDM/slime 624b824, the
MODEL_ARGS list as bash expands it) and the public config.json of the model it is for (sources in the fixture).
The derived flags must equal the script's, compared as parsed flag/value pairs through unirl's rebuild of slime's own
parser (order and spelling of numbers do not matter, the parsed values do). transformers' real config classes read
each config the way slime does (``AutoConfig.from_pretrained``, slime/backends/megatron_utils/arguments.py:199), and
slime's start-up assertion (:97-148), ported below, accepts the derived flags.
"""

from __future__ import annotations

import json
from argparse import Namespace
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.test_plugin_slime import BACKENDS, plan_of, shipped
from unirl.errors import RecipeInvalid
from unirl.plugins.slime.framework import SlimeFramework
from unirl.plugins.slime.model_args import (
    DEFAULTS,
    ModelArgsError,
    builtin_config,
    megatron_model_args,
    resolved,
)
from unirl.plugins.slime.schema import parse_argv, schema_problems
from unirl.recipe.schema import Recipe

FIXTURES = Path(__file__).parent / "fixtures" / "slime_models"
NAMES = sorted(p.stem for p in FIXTURES.glob("*.json"))


def fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return data


def parsed(argv: list[str], drop: tuple[str, ...] = ()) -> dict[str, Any]:
    values, problems = parse_argv(argv, "slime")
    assert problems == []
    return {k: v for k, v in values.items() if k not in drop}


def with_model(backend: str, path: str, **framework: Any) -> Recipe:
    recipe = shipped(backend)
    return replace(recipe, model=replace(recipe.model, path=path), framework={"name": backend, **framework})


def model_dir(tmp_path: Path, config: dict[str, Any]) -> Path:
    directory = tmp_path / "model"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(config))
    return directory


# --- the rule against slime's scripts --------------------------------------------------------------------------------


def test_every_script_read_has_a_fixture() -> None:
    assert NAMES == ["llama3.1-8B-Instruct", "llama3.2-3B-Instruct", "qwen2.5-0.5B", "qwen2.5-1.5B", "qwen2.5-7B",
                     "qwen3-0.6B", "qwen3-4B", "qwen3-4B-Instruct-2507", "qwen3-8B"]


@pytest.mark.parametrize("name", NAMES)
def test_derived_flags_are_the_scripts_flags(name: str) -> None:
    case = fixture(name)
    expected = case["expected"]
    if "refused" in expected:
        with pytest.raises(ModelArgsError, match=expected["refused"]) as caught:
            megatron_model_args(case["config"])
        assert case["config"]["architectures"][0] in str(caught.value)
        assert "framework.model_args" in str(caught.value)
        return
    derived = parsed(megatron_model_args(case["config"]))
    script = parsed(case["script_args"], drop=tuple(expected.get("script_only", ())))
    differs = {flag: [script.get(flag), derived.get(flag)] for flag in script.keys() | derived.keys()
               if script.get(flag) != derived.get(flag)}
    assert differs == expected.get("differs", {})


def test_the_one_script_that_disagrees_with_its_model_fails_slimes_own_check() -> None:
    """qwen2.5-1.5B.sh sets --rotary-base 10000; Qwen2.5-1.5B-Instruct's rope_theta is 1000000.0."""
    case = fixture("qwen2.5-1.5B")
    assert slime_hf_check(case["script_args"], case["config"]) == [
        "rope_theta in hf config 1000000.0 is not equal to rotary_base 10000"]
    assert slime_hf_check(megatron_model_args(case["config"]), case["config"]) == []


# --- the rule against transformers' and slime's reading of the config -----------------------------------------------

MEGATRON_DEFAULTS = {
    # the values argparse leaves when a flag is absent (Megatron-LM 1dcf0da megatron/training/arguments.py:1678
    # --rotary-base 10000, :1720 --untie-embeddings-and-output-weights store_true; --norm-epsilon from
    # TransformerConfig.layernorm_epsilon = 1e-5, megatron/core/transformer/transformer_config.py)
    "rotary_base": 10000, "untie_embeddings_and_output_weights": False, "norm_epsilon": 1e-5,
}
FLAG_DEST = {"--hidden-size": "hidden_size", "--num-attention-heads": "num_attention_heads",
             "--num-layers": "num_layers", "--ffn-hidden-size": "ffn_hidden_size",
             "--untie-embeddings-and-output-weights": "untie_embeddings_and_output_weights",
             "--norm-epsilon": "norm_epsilon", "--rotary-base": "rotary_base"}


def slime_hf_check(argv: list[str], config: dict[str, Any]) -> list[str]:
    """slime's ``_hf_validate_args`` (THUDM/slime 624b824 slime/backends/megatron_utils/arguments.py:97-148), line
    for line for a dense model, over the config as ``AutoConfig.from_pretrained`` reads it (:199) and the flags as
    argparse parses them."""
    import tempfile

    from transformers import AutoConfig

    with tempfile.TemporaryDirectory() as directory:
        (Path(directory) / "config.json").write_text(json.dumps(config))
        hf_config = AutoConfig.from_pretrained(directory)
    values = parse_argv(argv, "slime")[0]
    args = Namespace(**{**MEGATRON_DEFAULTS, **{FLAG_DEST[k]: v for k, v in values.items() if k in FLAG_DEST}})
    rope_params = getattr(hf_config, "rope_parameters", None)  # :110-114
    if isinstance(rope_params, dict) and "rope_theta" in rope_params:
        hf_rope_theta = rope_params["rope_theta"]
    else:
        hf_rope_theta = getattr(hf_config, "rope_theta", None)
    errors = []
    for hf_name, megatron_name, compare in [  # :118-128, the dense rows
        ("hidden_size", "hidden_size", lambda x, y: x == y),
        ("num_attention_heads", "num_attention_heads", lambda x, y: x == y),
        ("num_hidden_layers", "num_layers", lambda x, y: x == y),
        ("intermediate_size", "ffn_hidden_size", lambda x, y: x == y),
        ("tie_word_embeddings", "untie_embeddings_and_output_weights", lambda x, y: x != y),  # slime: not x == y
        ("rms_norm_eps", "norm_epsilon", lambda x, y: x == y),
    ]:
        if hasattr(hf_config, hf_name) and hasattr(args, megatron_name) and not compare(
                getattr(hf_config, hf_name), getattr(args, megatron_name)):
            errors.append(f"{hf_name} in hf config {getattr(hf_config, hf_name)} is not equal to {megatron_name} "
                          f"{getattr(args, megatron_name)}")
    if hf_rope_theta is not None and hf_rope_theta != args.rotary_base:  # :139-145
        errors.append(f"rope_theta in hf config {hf_rope_theta} is not equal to rotary_base {args.rotary_base}")
    return errors


@pytest.mark.parametrize("name", [n for n in NAMES if "refused" not in fixture(n)["expected"]])
def test_slimes_start_up_check_accepts_the_derived_flags(name: str) -> None:
    config = fixture(name)["config"]
    assert slime_hf_check(megatron_model_args(config), config) == []


@pytest.mark.parametrize("name", [n for n in NAMES if "refused" not in fixture(n)["expected"]])
def test_transformers_own_reading_of_the_config_derives_the_same_flags(name: str, tmp_path: Path) -> None:
    """The config as transformers 5 saves it (rope_theta moved into rope_parameters, defaults written out)."""
    from transformers import AutoConfig

    config = fixture(name)["config"]
    AutoConfig.from_pretrained(model_dir(tmp_path, config)).save_pretrained(tmp_path / "saved")
    saved = json.loads((tmp_path / "saved" / "config.json").read_text())
    assert "rope_parameters" in saved and "rope_theta" not in saved
    assert megatron_model_args(saved) == megatron_model_args(config)


@pytest.mark.parametrize("family", sorted(DEFAULTS))
def test_the_defaults_are_transformers_defaults(family: str) -> None:
    """A key config.json leaves out takes the config class's default, as slime's AutoConfig does."""
    from transformers import AutoConfig

    hf = AutoConfig.for_model(family)
    ours = resolved({"model_type": family})
    theirs = {key: getattr(hf, key) for key in DEFAULTS[family] if key != "rope_theta"}
    theirs["rope_theta"] = hf.rope_parameters["rope_theta"]
    assert {k: ours[k] for k in theirs} == theirs


def test_a_missing_key_takes_the_class_default() -> None:
    """Qwen2's num_key_value_heads defaults to 32, not to the query heads; an explicit null means the query heads."""
    from transformers import Qwen2Config

    base = {"model_type": "qwen2", "hidden_size": 2048, "num_attention_heads": 64, "intermediate_size": 5504,
            "num_hidden_layers": 4}
    for config in (base, {**base, "num_key_value_heads": None}):
        groups = Qwen2Config(**{k: v for k, v in config.items() if k != "model_type"}).num_key_value_heads
        args = megatron_model_args(config)
        if groups == 64:
            assert "--num-query-groups" not in args  # plain multi-head attention: Megatron's default
        else:
            assert args[args.index("--num-query-groups") + 1] == str(groups) == "32"


# --- what is refused -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("config", "names"), [
    ({"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "num_experts": 128,
      "moe_intermediate_size": 768}, "Qwen3MoeForCausalLM (model_type qwen3_moe) is a mixture-of-experts"),
    ({"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "n_routed_experts": 256},
     "DeepseekV3ForCausalLM (model_type deepseek_v3) is a mixture-of-experts"),
    ({"architectures": ["Glm4ForCausalLM"], "model_type": "glm4"}, "Glm4ForCausalLM (model_type glm4): unirl derives"),
    ({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "use_sliding_window": True}, "sliding-window"),
    ({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": True}, "attention_bias"),
    ({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "gelu"}, "hidden_act 'gelu'"),
    ({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
      "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}, "RoPE scaling"),
], ids=["qwen3_moe", "deepseek_v3", "glm4", "sliding_window", "bias", "gelu", "yarn"])
def test_other_architectures_are_refused_by_name(config: dict[str, Any], names: str) -> None:
    with pytest.raises(ModelArgsError) as caught:
        megatron_model_args(config)
    assert names in str(caught.value)
    assert "set framework.model_args" in str(caught.value)


# --- the plan --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_a_local_model_directory_gives_its_flags_to_the_plan(backend: str, tmp_path: Path) -> None:
    case = fixture("qwen3-4B")
    directory = model_dir(tmp_path, case["config"])
    plan = plan_of(backend, with_model(backend, str(directory)))
    derived = megatron_model_args(case["config"])
    assert plan.native_config["model_args"] == derived
    assert plan.native_config["args"][:len(derived)] == derived
    assert f"exec python3 train.py {' '.join(derived)} " in plan.command[2]
    assert plan.native_config["model_args_source"] == f"derived from {directory}/config.json"
    assert any(n.startswith(f"framework.model_args: derived from {directory}/config.json") for n in plan.notes)
    assert schema_problems(plan.native_config["args"], backend) == []
    BACKENDS[backend][0].validate(plan)


def test_a_builtin_model_gets_the_flags_of_the_qwen2_config_it_is_built_from() -> None:
    """builtin:tiny-arith is Qwen2Config(tie_word_embeddings=True, vocab of the character tokenizer, SHAPES[...])
    (unirl/data/builtin/tiny_model.py build); the plan derives from that without transformers."""
    from transformers import Qwen2Config

    from unirl.data.builtin.tiny_model import SHAPES, build_tokenizer

    for name in sorted(SHAPES):
        tok = build_tokenizer(name)  # a builtin's own vocabulary (tiny-arith-h32 has two Qwen tokens more)
        config = Qwen2Config(tie_word_embeddings=True, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                             eos_token_id=tok.eos_token_id, **{"vocab_size": len(tok), **SHAPES[name]})
        assert megatron_model_args(builtin_config(name)) == megatron_model_args(config.to_dict())
    plan = plan_of("slime", with_model("slime", "builtin:tiny-arith"))
    args = plan.native_config["model_args"]
    assert args == megatron_model_args(Qwen2Config(tie_word_embeddings=True, vocab_size=len(build_tokenizer()),
                                                   **SHAPES["tiny-arith"]).to_dict())
    assert parsed(args) == {"--swiglu": True, "--num-layers": 2, "--hidden-size": 64, "--ffn-hidden-size": 256,
                            "--num-attention-heads": 4, "--group-query-attention": True, "--num-query-groups": 2,
                            "--use-rotary-position-embeddings": True, "--disable-bias-linear": True,
                            "--add-qkv-bias": True, "--normalization": "RMSNorm", "--norm-epsilon": 1e-6,
                            "--rotary-base": 1000000, "--vocab-size": 20}
    assert plan.native_config["model_args_source"].startswith("derived from builtin:tiny-arith")
    SlimeFramework().validate(plan)


def test_a_hub_id_reads_the_local_hugging_face_cache_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants

    cache = tmp_path / "hub"
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    recipe = with_model("slime", "Qwen/Qwen3-4B")
    with pytest.raises(RecipeInvalid) as caught:
        plan_of("slime", recipe)
    [problem] = [p for p in caught.value.problems if p.field == "framework.model_args"]
    assert "Qwen/Qwen3-4B's config.json could not be read without the hub" in str(problem)
    assert "huggingface-cli download Qwen/Qwen3-4B --local-dir DIR" in str(problem)

    # the layout huggingface_hub writes: refs/main names the snapshot holding config.json
    repo = cache / "models--Qwen--Qwen3-4B"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0" * 40)
    snapshot = repo / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(fixture("qwen3-4B")["config"]))
    with pytest.raises(RecipeInvalid) as caught:
        plan_of("slime", recipe)
    assert [p.field for p in caught.value.problems] == ["model.path"]  # slime itself needs a local directory
    from unirl.plugins.slime.framework import derived_model_args

    args, where = derived_model_args(recipe)
    assert args == megatron_model_args(fixture("qwen3-4B")["config"])
    assert where == f"{snapshot}/config.json (Qwen/Qwen3-4B in the Hugging Face cache)"


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_a_model_it_cannot_derive_is_refused_naming_the_architecture(backend: str, tmp_path: Path) -> None:
    moe = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "num_experts": 128}
    with pytest.raises(RecipeInvalid) as caught:
        plan_of(backend, with_model(backend, str(model_dir(tmp_path, moe))))
    [problem] = [p for p in caught.value.problems if p.field == "framework.model_args"]
    assert "Qwen3MoeForCausalLM (model_type qwen3_moe) is a mixture-of-experts model" in str(problem)
    assert "scripts/models/" in str(problem)
    missing = tmp_path / "empty"
    missing.mkdir()
    with pytest.raises(RecipeInvalid, match=r"empty/config\.json does not exist"):
        plan_of(backend, with_model(backend, str(missing)))


def test_given_model_args_win_over_the_config(tmp_path: Path) -> None:
    directory = model_dir(tmp_path, fixture("qwen3-4B")["config"])
    given = fixture("qwen3-0.6B")["script_args"]
    plan = plan_of("slime", with_model("slime", str(directory), model_args=given))
    assert plan.native_config["model_args"] == given
    assert plan.native_config["model_args_source"] == "framework.model_args"
    script = plan_of("slime", with_model("slime", str(directory), model_args_script="scripts/models/qwen3-4B.sh"))
    assert script.native_config["model_args"] == [] and script.native_config["model_args_source"] == (
        "framework.model_args_script")
