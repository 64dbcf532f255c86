"""unirl's built-in rollout engines plugin: the engines unirl can name (hf, vllm, sglang); recipe validation takes
its choices from the registry this fills, so a plugin's engine is accepted the same way."""
