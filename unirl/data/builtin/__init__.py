"""The embedded default: a tiny model and an arithmetic task that train on a CPU with no model hub."""
