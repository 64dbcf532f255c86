"""The sandbox for untrusted generated code (bubblewrap, seccomp, a cgroup per run, a fresh keyring).

```python
from unirl.rewards.sandbox import SandboxLimits, run_sandboxed

result = run_sandboxed("print(input()[::-1])", stdin="abc", limits=SandboxLimits(wall_seconds=2))
result.status, result.stdout  # ('ok', 'cba\\n')
```
"""

from unirl.rewards.sandbox.core import (
    IsolationReport,
    SandboxLimits,
    SandboxOverloaded,
    SandboxResult,
    SandboxSession,
    SandboxUnavailable,
    check_isolation,
    run_sandboxed,
    start_sandboxed,
)

__all__ = ["IsolationReport", "SandboxLimits", "SandboxOverloaded", "SandboxResult", "SandboxSession",
           "SandboxUnavailable", "check_isolation", "run_sandboxed", "start_sandboxed"]
