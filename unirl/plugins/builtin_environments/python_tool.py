"""``python``: answer a question, with a tool that runs the model's Python code in unirl's sandbox.

Model-written code is hostile until checked: ``run_python`` runs it with
:func:`unirl.rewards.sandbox.core.run_sandboxed`, the sandbox the reward ``code_tests`` runs programs in (bubblewrap:
no network, a read-only root, a private /tmp, no host files; cgroup limits on memory and processes; CPU and
wall-clock limits). What it printed is the tool's answer; a program that fails, runs past its limits or is killed
becomes an error message the model sees (``tool_failed``, counted), and the sandbox being unavailable ends the
episode as an environment error, never as a fake answer.

A turn without a tool call is the final answer, compared with the row's reference the way ``math_answer`` does
(the last ``\\boxed{}``, else the last number): reward 1 when it matches. For a model that writes Hermes-style tool
calls (``<tool_call>{"name": "run_python", "arguments": {"code": "print(6 * 7)"}}</tool_call>``).
"""

from __future__ import annotations

from unirl.environments.contract import Environment, Step, Task, ToolError, environment, spec_of, tool
from unirl.plugins.builtin_rewards.math_answer import answers_match, extract_answer, reference_answer
from unirl.rewards.sandbox.core import SandboxLimits, run_sandboxed

MAX_OUTPUT_CHARS = 2000  # of stdout shown to the model: a program cannot flood the context
MAX_CODE_CHARS = 20_000


@environment("python", metrics=("correct",))
class PythonTool(Environment):
    """Answer the question; run_python runs code in unirl's sandbox and returns what it printed."""

    max_turns = 6

    def __init__(self, cpu_seconds: float = 5.0, wall_seconds: float = 10.0, memory_mb: int = 256) -> None:
        super().__init__(cpu_seconds=cpu_seconds, wall_seconds=wall_seconds, memory_mb=memory_mb)
        self.limits = SandboxLimits(cpu_seconds=float(cpu_seconds), wall_seconds=float(wall_seconds),
                                    memory_mb=int(memory_mb))
        self.reference: str | None = None

    def reset(self, task: Task) -> str:
        self.reference = task.reference
        prompt = task.prompt if isinstance(task.prompt, str) else str(task.prompt[-1].get("content", ""))
        return prompt

    def step(self, action: str) -> Step:
        if "<tool_call>" in action:
            return super().step(action)
        answer = extract_answer(action)
        correct = self.reference is not None and answer is not None and answers_match(
            answer, reference_answer(self.reference))
        return Step(reward=1.0 if correct else 0.0, done=True, metrics={"correct": float(correct)})

    @tool
    def run_python(self, code: str) -> str:
        """Run Python code in a sandbox and return what it printed to stdout."""
        if len(code) > MAX_CODE_CHARS:
            raise ToolError(f"the code is {len(code)} characters; at most {MAX_CODE_CHARS}")
        # SandboxUnavailable / SandboxOverloaded are InfrastructureErrors: the machine's fault, not the model's, so
        # they end the episode as an environment error instead of becoming the tool's answer
        result = run_sandboxed(code, limits=self.limits)
        if result.status != "ok":
            detail = result.stderr.strip()[-500:]
            said = result.reason if result.reason.startswith(result.status) else f"{result.status}: {result.reason}"
            raise ToolError(said + (f"\n{detail}" if detail else ""))
        out = result.stdout
        return out if len(out) <= MAX_OUTPUT_CHARS else out[:MAX_OUTPUT_CHARS] + "\n...(output cut)"


PYTHON = spec_of(PythonTool)
