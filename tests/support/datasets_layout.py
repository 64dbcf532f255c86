"""openai/gsm8k as the hub ships it, rebuilt on disk (there is no hub here), and verl's preprocessed form of it.

``gsm8k_repo`` writes a dataset repository folder as openai/gsm8k has it: ``main/`` and ``socratic/`` parquet
shards named as on the hub and a README.md whose YAML header lists ``configs:``, which ``datasets.load_dataset``
resolves with the same code as a downloaded repository.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# Two rows of openai/gsm8k as it ships (main: worked solution ending "#### <answer>"; socratic: the same solution
# with a question before each step).
QUESTION = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How "
            "many clips did Natalia sell altogether in April and May?")
MAIN = ("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips altogether in "
        "April and May.\n#### 72")
SOCRATIC = ("How many clips did Natalia sell in May? ** Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nHow many "
            "clips did Natalia sell altogether in April and May? ** Natalia sold 48+24 = <<48+24=72>>72 clips "
            "altogether in April and May.\n#### 72")
Q2 = "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. How much did she earn?"
MAIN2 = ("Weng earns 12/60 = $<<12/60=0.2>>0.2 per minute.\nWorking 50 minutes, she earned 0.2 x 50 = "
         "$<<0.2*50=10>>10.\n#### 10")
CARD = """---
dataset_info:
- config_name: main
- config_name: socratic
configs:
- config_name: main
  data_files:
  - split: train
    path: main/train-*
  - split: test
    path: main/test-*
- config_name: socratic
  data_files:
  - split: train
    path: socratic/train-*
  - split: test
    path: socratic/test-*
---
# Dataset Card for GSM8K
"""


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def gsm8k_repo(root: Path) -> Path:
    """A local copy of openai/gsm8k's repository layout (file names as on the hub)."""
    repo = root / "gsm8k"
    for config, solution in (("main", MAIN), ("socratic", SOCRATIC)):
        write_parquet(repo / config / "train-00000-of-00001.parquet",
                      [{"question": QUESTION, "answer": solution}, {"question": Q2, "answer": MAIN2}])
        write_parquet(repo / config / "test-00000-of-00001.parquet", [{"question": QUESTION, "answer": solution}])
    (repo / "README.md").write_text(CARD)
    return repo


def verl_gsm8k_rows() -> list[dict[str, Any]]:
    """Rows as verl's examples/data_preprocess/gsm8k.py writes them (verl 0.9.1): the reference nested."""
    return [{"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": QUESTION}], "ability": "math",
             "reward_model": {"style": "rule", "ground_truth": "72"},
             "extra_info": {"split": "train", "index": 0, "answer": MAIN, "question": QUESTION}}]
