"""Rewards: the contract authors write against (``@unirl.reward``, Sample, RewardResult), the run's reward
specification, the executor with its worker processes and their messages, and the sandbox for generated code.

This is the light core that runs inside backend interpreters: it imports no backend, no host and no CLI.
"""
