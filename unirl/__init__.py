"""unirl: one front end for RL post-training across TRL, verl, OpenRLHF, NeMo RL, slime and vime.

Importing unirl is cheap: it never imports torch, transformers, ray or any backend.
"""

from unirl import logs as _logs
from unirl.environments.contract import Environment, Step, Task, ToolError, environment, tool
from unirl.hookspecs import hookimpl
from unirl.rewards.contract import RewardResult, Sample, reward

__version__ = "0.1.0"

__all__ = ["Environment", "RewardResult", "Sample", "Step", "Task", "ToolError", "__version__", "environment",
           "hookimpl", "reward", "tool"]

_logs.configure()  # unirl's messages on stderr in every process that imports it (see unirl.logs)
