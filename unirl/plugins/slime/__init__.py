"""unirl plugin: slime and vime (slime's trainer with vLLM rollouts) as backends, one family in one package."""
