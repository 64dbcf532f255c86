"""Bad input: every kind of broken data file, model directory, recipe value, recipe file, reward file, samples file
and command line. Each must fail before anything expensive starts (no model loaded, no run directory made, nothing
already written touched), with exit code 2 and a message that names the field, the value and what is allowed; all
problems of one command are reported at once."""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Callable
from pathlib import Path

from tests.adversarial import Case
from tests.support.cli import run_cli
from tests.support.datasets_layout import gsm8k_repo, verl_gsm8k_rows, write_parquet

AREA = "bad input (data, model, recipe, CLI)"
ROWS = [{"prompt": f"{i}+1=", "answer": str(i + 1)} for i in range(40)]
# A small run, so a case that wrongly starts training is caught by the missing error, not by a long wait.
SMALL = ["algorithm.steps=2", "algorithm.prompts_per_step=2", "algorithm.samples_per_prompt=2", "eval.every_steps=0"]


def cli(tmp: Path, *argv: str) -> tuple[int, str, str]:
    """``unirl ARGV`` in this process, from ``tmp``, with its own runs directory; (exit code, stdout, stderr)."""
    out = run_cli(*argv, cwd=tmp, env={"UNIRL_RUNS_DIR": str(tmp / "runs")})
    return out.returncode, out.stdout, out.stderr


def refused(argv: Callable[[Path], list[str]], *expected: str, code: int = 2) -> Callable[[Path], None]:
    """The command exits ``code`` naming every ``expected`` text, leaves no run directory, and touches no older run."""
    def check(tmp: Path) -> None:
        older = tmp / "runs" / "older" / "run"
        older.mkdir(parents=True)
        (older / "metrics.jsonl").write_text('{"step": 1}\n')
        args = argv(tmp)
        status, stdout, stderr = cli(tmp, *args)
        shown = stdout + stderr
        assert status == code, f"exit {status} (expected {code}) for {args}:\n{shown[-1500:]}"
        for text in expected:
            assert text in shown, f"{text!r} not in the message for {args}:\n{shown[-1500:]}"
        assert "Traceback" not in shown, f"a traceback instead of a message:\n{shown[-1500:]}"
        made = [p for p in (tmp / "runs").rglob("*") if p.is_file() and older not in p.parents]
        assert not made, f"bad input left files behind: {made[:5]}"
        assert (older / "metrics.jsonl").read_text() == '{"step": 1}\n', "an older run was touched"
    return check


def data_file(name: str, content: bytes | str) -> Callable[[Path], list[str]]:
    def argv(tmp: Path) -> list[str]:
        path = tmp / name
        if isinstance(content, str):
            path.write_text(content, encoding="utf-8")
        else:
            path.write_bytes(content)
        return [f"data.train={path}", "data.eval=null", *SMALL]
    return argv


def jsonl(rows: list[object]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def parquet_bytes() -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = io.BytesIO()
    pq.write_table(pa.table({"question": ["1+1="], "answer": ["2"]}), sink)
    return sink.getvalue()


def model_dir(**files: bytes | str) -> Callable[[Path], list[str]]:
    def argv(tmp: Path) -> list[str]:
        model = tmp / "model"
        model.mkdir()
        defaults: dict[str, bytes | str] = {"config.json": json.dumps({"model_type": "qwen2"}),
                                            "tokenizer.json": "{}", "model.safetensors": safetensors(8)}
        for name, content in {**defaults, **files}.items():
            if content is None:
                continue
            target = model / name
            target.write_bytes(content) if isinstance(content, bytes) else target.write_text(content)
        return [f"model.path={model}", *SMALL]
    return argv


def safetensors(n_bytes: int, claimed: int | None = None) -> bytes:
    header = json.dumps({"w": {"dtype": "F32", "shape": [n_bytes // 4], "data_offsets": [0, claimed or n_bytes]}})
    return struct.pack("<Q", len(header)) + header.encode() + b"\0" * n_bytes


def recipe_file(text: str) -> Callable[[Path], list[str]]:
    def argv(tmp: Path) -> list[str]:
        (tmp / "mine.yaml").write_text(text)
        return ["plan", "recipe=./mine.yaml"]
    return argv


def reward_file(body: str, *extra: str) -> Callable[[Path], list[str]]:
    def argv(tmp: Path) -> list[str]:
        (tmp / "r.py").write_text(body)
        return ["plan", "rewards=[{name:mine,file:./r.py}]", "eval.accuracy_reward=mine", *extra]
    return argv


def samples(content: bytes | str, *names: str) -> Callable[[Path], list[str]]:
    def argv(tmp: Path) -> list[str]:
        path = tmp / "s.jsonl"
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        return ["reward", "test", *(names or ("math_answer",)), "--samples", str(path)]
    return argv


def fixed(*args: str) -> Callable[[Path], list[str]]:
    return lambda tmp: list(args)


def native_script(text: str) -> Callable[[Path], list[str]]:
    def argv(tmp: Path) -> list[str]:
        (tmp / "run.sh").write_text(text)
        return ["import", "verl", str(tmp / "run.sh")]
    return argv


def bash_arithmetic_wraps(tmp: Path) -> None:
    """``N=$((N*N*N))`` forty times: bash's arithmetic is 64-bit, so the import's is too (a Python integer of 3**40
    digits would never finish)."""
    (tmp / "run.sh").write_text("N=99999\n" + "N=$((N*N*N))\n" * 40
                                + "python3 -m verl.trainer.main_ppo data.train_batch_size=$N\n")
    status, _, stderr = cli(tmp, "import", "verl", str(tmp / "run.sh"))
    assert status in (0, 2) and "Traceback" not in stderr, stderr[-1500:]
    value = next(line for line in stderr.splitlines() if "data.train_batch_size = " in line)
    number = int(value.split("=", 1)[1].split("(")[0].strip().strip("'"))
    assert -2**63 <= number < 2**63, value


def markup_is_text(tmp: Path) -> None:
    """Completions that look like terminal markup are shown as text, and scoring results are not lost."""
    path = tmp / "s.jsonl"
    path.write_text(jsonl([{"completion": "[/bogus] 2", "reference": "2"},
                           {"completion": "[link=http://evil.example]1[/link]", "reference": "2"},
                           {"completion": "[bold red]3", "reference": "3"}]))
    status, stdout, stderr = cli(tmp, "reward", "test", "math_answer", "--samples", str(path))
    assert status == 0, stdout + stderr
    assert "[/bogus] 2" in stdout and "[link=http://evil.example]" in stdout and "[bold red]" in stdout, stdout
    assert "\x1b]8;" not in stdout, "a hyperlink escape was written"


def u2028_is_data(tmp: Path) -> None:
    """U+2028 inside a JSON string is data (unirl's own exporter writes it): the file is accepted."""
    path = tmp / "s.jsonl"
    path.write_text(json.dumps({"completion": "7\u2028 8", "reference": "8"}, ensure_ascii=False) + "\n")
    status, stdout, stderr = cli(tmp, "reward", "test", "math_answer", "--samples", str(path), "--json")
    assert status == 0, stdout + stderr
    assert json.loads(stdout.split("\n")[0])["scores"]["math_answer"] == 1.0  # not splitlines: U+2028 is data


def plan_help(tmp: Path) -> None:
    status, stdout, stderr = cli(tmp, "plan", "--help")
    assert status == 0 and "usage: unirl plan" in stdout and "--validate" in stdout, stdout + stderr


CASES = [
    # -- data files
    Case("an empty data file", refused(data_file("d.jsonl", ""), "data.train=", "holds no rows")),
    Case("a data file of blank lines", refused(data_file("d.jsonl", "\n \n\t\n"), "holds no rows")),
    Case("a malformed JSON line", refused(data_file("d.jsonl", jsonl(ROWS[:3]) + "{nope\n"), "line 4", "not JSON")),
    Case("a binary file named .jsonl", refused(data_file("d.jsonl", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"), "binary")),
    Case("a Latin-1 file", refused(data_file("d.jsonl", '{"prompt": "caf\xe9", "answer": "1"}\n'.encode("latin-1")),
                                   "not UTF-8", "line 1")),
    Case("a .json file holding an object", refused(data_file("d.json", '{"prompt": "x"}'), "list of objects")),
    Case("a .json list of strings", refused(data_file("d.json", '["a", "b"]'), "item 0 is a str")),
    Case("garbage parquet", refused(data_file("d.parquet", b"PAR1 this is not parquet PAR1"), "parquet")),
    Case("parquet without the prompt column", refused(lambda t: data_file("d.parquet", parquet_bytes())(t),
                                                      "data.prompt_key='prompt'", "question")),
    Case("a JSON array line instead of an object", refused(data_file("d.jsonl", jsonl([[1, 2]])), "not an object")),
    Case("JSON nested 100,000 deep", refused(data_file("d.jsonl", "[" * 100_000 + "]" * 100_000 + "\n"),
                                             "data.train")),
    Case("no prompt column", refused(data_file("d.jsonl", jsonl([{"question": "1+1=", "answer": "2"}] * 4)),
                                     "data.prompt_key='prompt'", "question")),
    Case("prompts of mixed types", refused(data_file("d.jsonl", jsonl(
        [ROWS[0], {"prompt": [{"role": "user", "content": "hi"}], "answer": "1"}, *ROWS[1:4]])), "mixes prompt types")),
    Case("a prompt that is a number", refused(data_file("d.jsonl", jsonl([{"prompt": 3, "answer": "1"}] * 4)),
                                              "is a int")),
    Case("a wrong answer_key", refused(lambda t: [*data_file("d.jsonl", jsonl(ROWS))(t), "data.answer_key=solution"],
                                       "data.answer_key='solution'", "answer")),
    Case("answer missing in some rows", refused(data_file("d.jsonl", jsonl([*ROWS[:3], {"prompt": "x"}, *ROWS[3:]])),
                                                "row 3", "lacks this column")),
    Case("fewer rows than one step", refused(lambda t: [*data_file("d.jsonl", jsonl(ROWS[:3]))(t),
                                                        "algorithm.prompts_per_step=8"],
                                             "fewer than one training step")),
    Case("a template naming a missing column", refused(lambda t: [*data_file("d.jsonl", jsonl(ROWS))(t),
                                                                  "data.prompt_template='Q: {question}'"],
                                                       "data.prompt_template", "KeyError")),
    Case("a bad train file and a bad eval file, both reported", refused(
        lambda t: [*data_file("d.jsonl", "")(t)[:1], f"data.eval={data_file('e.jsonl', '{x')(t)[0].split('=')[1]}",
                   *SMALL], "data.train=", "data.eval=")),
    Case("a wrong prompt_key and answer_key on the builtin data", refused(
        fixed("data.prompt_key=question", "data.answer_key=solution", *SMALL), "data.prompt_key='question'",
        "data.answer_key='solution'", "builtin:arith@train", "builtin:arith@heldout")),
    Case("a hub dataset folder with configs and none named", refused(
        lambda t: [f"data.train=hf:{gsm8k_repo(t)}@train", "data.eval=null", "data.prompt_key=question", *SMALL],
        "Config name is missing", "['main', 'socratic']")),
    Case("an answer_key naming a nested object", refused(
        lambda t: [f"data.train={write_parquet(t / 'v.parquet', verl_gsm8k_rows())}", "data.eval=null",
                   "data.answer_key=reward_model", *SMALL], "data.answer_key=reward_model.ground_truth")),
    Case("a directory named like a data file", refused(lambda t: ((t / "d.jsonl").mkdir(), [
        f"data.train={t / 'd.jsonl'}", *SMALL])[1], "data.train=", "no such file")),
    # -- model directories and hub ids
    Case("a fake safetensors file", refused(model_dir(**{"model.safetensors": b"not safetensors at all"}),
                                            "model.path=", "model.safetensors")),
    Case("a truncated safetensors file", refused(model_dir(**{"model.safetensors": safetensors(8, claimed=4096)}),
                                                 "truncated")),
    Case("config.json that is not JSON", refused(model_dir(**{"config.json": "{model_type"}),
                                                 "config.json is not JSON")),
    Case("config.json without model_type", refused(model_dir(**{"config.json": "{}"}), "no model_type")),
    Case("a model without tokenizer files", refused(model_dir(**{"tokenizer.json": None}), "no tokenizer files")),
    Case("a weight index naming a missing shard", refused(model_dir(**{"model.safetensors.index.json": json.dumps(
        {"weight_map": {"w": "model-00002.safetensors"}})}), "model-00002.safetensors")),
    Case("a garbage .bin weights file", refused(model_dir(**{"pytorch_model.bin": b"garbage"}), "not a PyTorch")),
    Case("an unreachable hub model id", refused(fixed("model.path=unirl-test/no-such-model", *SMALL),
                                                "model.path='unirl-test/no-such-model'")),
    Case("an unreachable hub dataset", refused(fixed("data.train=hf:unirl-test/no-such-data@train", *SMALL),
                                               "data.train='hf:unirl-test/no-such-data@train'")),
    # -- recipe values
    Case("NaN and infinity in float fields, all reported", refused(fixed(
        "plan", "algorithm.max_grad_norm=nan", "algorithm.lr=inf", "rewards.0.weight=nan",
        "reward_policy.fallback_score=-inf", "algorithm.temperature=nan"),
        "algorithm.max_grad_norm=nan", "algorithm.lr=inf", "rewards[0].weight=nan", "fallback_score=-inf",
        "algorithm.temperature=nan")),
    Case("absurd values", refused(fixed("plan", "reward_policy.workers=100000", "algorithm.steps=10000000000"),
                                  "reward_policy.workers=100000", "algorithm.steps=10000000000")),
    Case("steps=1e14 (a float for an integer)", refused(fixed("plan", "algorithm.steps=1e14"), "algorithm.steps")),
    Case("+algorithm.lrr=1e-6, the form Hydra suggests", refused(fixed("plan", "+algorithm.lrr=1e-6"),
                                                                  "algorithm.lrr", "algorithm.lr")),
    Case("algorithm.lrr=1e-6", refused(fixed("plan", "algorithm.lrr=1e-6"), "algorithm.lrr", "algorithm.lr")),
    Case("algorithm.lr=abc keeps the reason", refused(fixed("plan", "algorithm.lr=abc"), "algorithm.lr",
                                                      "could not be converted to Float")),
    Case("a misspelled group option", refused(fixed("plan", "recipe=grpo_mth"), "grpo_mth", "grpo_math")),
    # -- recipe files
    Case("invalid recipe YAML", refused(recipe_file("algorithm: {lr: [1,\n"), "mine.yaml", "YAML")),
    Case("a recipe YAML that is a list", refused(recipe_file("- a\n- b\n"), "mine.yaml", "mapping")),
    Case("a recipe file with an unknown key", refused(recipe_file("algorithm:\n  lrr: 1.0e-6\n"),
                                                      "algorithm.lrr", "algorithm.lr")),
    Case("a recipe file that does not exist", refused(fixed("plan", "recipe=./missing.yaml"), "missing.yaml")),
    # -- reward files
    Case("a reward file calling sys.exit at import", refused(reward_file("import sys\nsys.exit(0)\n"),
                                                             "rewards[0].file='./r.py'", "exited")),
    Case("a reward file calling os._exit at import", refused(reward_file("import os\nos._exit(3)\n"),
                                                             "rewards[0].file='./r.py'", "exit status 3")),
    Case("a reward file that hangs at import", refused(reward_file("import time\ntime.sleep(600)\n",
                                                                   "reward_policy.startup_timeout_s=2"),
                                                       "rewards[0].file='./r.py'", "did not finish")),
    Case("a reward file with a syntax error", refused(reward_file("def (:\n"), "rewards[0].file='./r.py'",
                                                      "SyntaxError")),
    Case("a reward file that crashes the interpreter", refused(reward_file(
        "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n"), "rewards[0].file='./r.py'", "signal 11")),
    # -- samples files for `unirl reward test`
    Case("a binary samples file", refused(samples(b"\0\1\2\3\x89PNG"), "--samples", "binary")),
    Case("a non-integer completion_tokens", refused(samples(jsonl([{"completion": "1", "completion_tokens": "ten"}])),
                                                    "completion_tokens='ten'", "integer")),
    Case("a Latin-1 samples file", refused(samples('{"completion": "caf\xe9"}\n'.encode("latin-1")), "not UTF-8")),
    Case("a samples line without completion", refused(samples(jsonl([{"prompt": "x"}])), "'completion'")),
    Case("a samples line of the wrong type", refused(samples(jsonl([{"completion": ["a"]}])),
                                                     "completion must be str")),
    Case("an unknown reward name", refused(samples(jsonl([{"completion": "1"}]), "nope"), "unknown reward 'nope'")),
    Case("reward test --file that exits at import", refused(
        lambda t: ((t / "r.py").write_text("import os\nos._exit(2)\n"),
                   [*samples(jsonl([{"completion": "1"}]))(t), "--file", str(t / "r.py")])[1],
        "--file", "exit status")),
    Case("completions that look like terminal markup", markup_is_text),
    Case("U+2028 inside a samples string", u2028_is_data),
    # -- the command line itself
    Case("unirl plan --help", plan_help),
    Case("an unknown flag to a verb", refused(fixed("plan", "--bogus"), "--bogus")),
    Case("an unknown flag to compare", refused(fixed("compare", "--bogus", "x"), "--bogus")),
    Case("reward without a subcommand", refused(fixed("reward"), "unirl reward", "test")),
    Case("an unknown framework", refused(fixed("+framework=nope"), "unknown framework 'nope'")),
    # -- values that used to fail only after the model loaded
    Case("seed=-1", refused(fixed("seed=-1", *SMALL), "seed=-1", "[0, 4294967295]")),
    Case("a seed past 32 bits", refused(fixed("seed=99999999999999999999999", *SMALL), "seed=", "[0, 4294967295]")),
    Case("resources.nodes=2 on the local scheduler", refused(fixed("resources.nodes=2", *SMALL), "resources.nodes=2",
                                                             "scheduler=slurm")),
    Case("a reward kwarg its function does not take", refused(fixed(
        "rewards=[{name:numeric_closeness,kwargs:{scal:3}}]", "eval.accuracy_reward=null", *SMALL),
        "rewards[0].kwargs", "scale", "'scal'")),
    Case("a TRL override of the wrong type", refused(fixed("+framework.overrides.learning_rate=abc", *SMALL),
                                                     "framework.overrides.learning_rate='abc'", "a number")),
    Case("fewer train rows than one step's prompts", refused(fixed("data.train_rows=7", "algorithm.steps=2"),
                                                             "data.train_rows=7", "prompts_per_step=16")),
    Case("an option of a tracker that is not enabled", refused(fixed(
        "logging.trackers=[]", "logging.tracker_options.wandb.mode=bogus", *SMALL),
        "logging.tracker_options.wandb.mode='bogus'", "offline")),
    # -- unirl import: a native script is hostile input too
    Case("import: a script whose variables double each line", refused(native_script(
        "A=xxxxxxxxxxxxxxxx\n" + "A=$A$A$A$A\n" * 30 + "python3 -m verl.trainer.main_ppo trainer.total_epochs=$A\n"),
        "expands to over 1,048,576 characters")),
    Case("import: a script whose arithmetic squares a number each line", bash_arithmetic_wraps),
    Case("import: a file that does not exist", refused(fixed("import", "verl", "missing.sh"), "missing.sh",
                                                       "no such file")),
    Case("import: an OpenRLHF file that does not exist", refused(fixed("import", "openrlhf", "missing.sh"),
                                                                 "missing.sh", "no such file")),
    Case("import: a TRL config that does not exist", refused(fixed("import", "trl", "nope.json"), "nope.json")),
    Case("import: a 2 MB script", refused(lambda t: ((t / "big.sh").write_text("#" * (2 << 20)),
                                                     ["import", "verl", str(t / "big.sh")])[1], "2,097,152 bytes")),
    Case("import: a TRL config nested 100,000 deep", refused(lambda t: (
        (t / "deep.json").write_text("[" * 100_000 + "]" * 100_000),
        ["import", "trl", str(t / "deep.json")])[1], "deep.json")),
]

