"""unirl's own plugins, in one tuple (pytest's ``default_plugins``, datasette's ``DEFAULT_PLUGINS``, tox's
``internal_plugins``): each registers through the same hooks as a third party's, and adding one is one line here.

The name is what ``UNIRL_PLUGINS_BLOCK`` and ``unirl plugins`` use; the module is imported when the host is built
(plugin modules are small: their components are registered as lazy ``"module:attr"`` paths).
"""

from __future__ import annotations

BUILTIN_PLUGINS: tuple[tuple[str, str], ...] = (
    ("recorder", "unirl.record.recorder"),
    ("progress", "unirl.record.progress"),
    ("rollout_engines", "unirl.backend.rollout_engines"),
    ("trl", "unirl.plugins.trl.plugin"),
    ("verl", "unirl.plugins.verl.plugin"),
    ("openrlhf", "unirl.plugins.openrlhf.plugin"),
    ("nemo_rl", "unirl.plugins.nemo_rl.plugin"),
    ("slime", "unirl.plugins.slime.plugin"),
    ("local", "unirl.plugins.local.plugin"),
    ("ray", "unirl.plugins.ray.plugin"),
    ("slurm", "unirl.plugins.slurm.plugin"),
    ("rewards", "unirl.plugins.builtin_rewards.plugin"),
)
