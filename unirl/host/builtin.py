"""unirl's own plugins, in one tuple (pytest's ``default_plugins``, datasette's ``DEFAULT_PLUGINS``, tox's
``internal_plugins``): each registers through the same hooks as a third party's, and adding one is one line here.

The name is what ``UNIRL_PLUGINS_BLOCK`` and ``unirl plugins`` use; the module is imported when the host is built
(plugin modules are small: their components are registered as lazy ``"module:attr"`` paths). ``in_backend`` marks
the few that a native backend's own processes load too (they implement the run-record hooks and import nothing but
the light core), so a reward worker inside verl never imports the framework plugins.
"""

from __future__ import annotations

from typing import NamedTuple


class BuiltinPlugin(NamedTuple):
    name: str
    module: str
    in_backend: bool = False


BUILTIN_PLUGINS: tuple[BuiltinPlugin, ...] = (
    BuiltinPlugin("recorder", "unirl.record.recorder", in_backend=True),
    BuiltinPlugin("progress", "unirl.record.progress", in_backend=True),
    BuiltinPlugin("rollout_engines", "unirl.plugins.rollout_engines.plugin"),
    BuiltinPlugin("config_groups", "unirl.recipe.config_groups"),
    BuiltinPlugin("trl", "unirl.plugins.trl.plugin"),
    BuiltinPlugin("verl", "unirl.plugins.verl.plugin"),
    BuiltinPlugin("openrlhf", "unirl.plugins.openrlhf.plugin"),
    BuiltinPlugin("nemo_rl", "unirl.plugins.nemo_rl.plugin"),
    BuiltinPlugin("slime", "unirl.plugins.slime.plugin"),
    BuiltinPlugin("local", "unirl.plugins.local.plugin"),
    BuiltinPlugin("ray", "unirl.plugins.ray.plugin"),
    BuiltinPlugin("slurm", "unirl.plugins.slurm.plugin"),
    BuiltinPlugin("rewards", "unirl.plugins.builtin_rewards.plugin"),
    BuiltinPlugin("environments", "unirl.plugins.builtin_environments.plugin"),
    # Experiment trackers (logging.trackers), one plugin each so the host isolates and counts each on its own.
    BuiltinPlugin("tensorboard", "unirl.plugins.trackers.tensorboard"),
    BuiltinPlugin("wandb", "unirl.plugins.trackers.wandb"),
    BuiltinPlugin("mlflow", "unirl.plugins.trackers.mlflow"),
    BuiltinPlugin("trackio", "unirl.plugins.trackers.trackio"),
)
