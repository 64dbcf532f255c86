"""Multi-turn environments: the contract (:mod:`unirl.environments.contract`) and the episode loop every rollout
engine drives (:mod:`unirl.environments.episode`)."""
