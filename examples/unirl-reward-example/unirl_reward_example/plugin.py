"""The entry point: unirl loads this module and calls its hooks."""

import unirl
from unirl_reward_example.brevity import brevity


@unirl.hookimpl
def unirl_add_rewards(registry):
    registry.add(brevity)
