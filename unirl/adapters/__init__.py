"""One module per backend speaking its native reward contract, all fed by the run's reward specification.

Each is importable in the backend's own interpreter with only unirl's light core installed: none imports
torch, ray or the backend at module level.
"""
