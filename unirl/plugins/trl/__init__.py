"""The TRL backend: GRPO through ``trl.GRPOTrainer``; unirl's embedded default on a CPU."""
