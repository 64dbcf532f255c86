"""Prompts and models before training: loading data sources, checking data files and model directories cheaply
(the preflight), and the built-in task and tiny models (``builtin:``).
"""
