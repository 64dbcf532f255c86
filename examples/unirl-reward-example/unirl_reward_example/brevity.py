"""A length-shaping reward with a component for the length itself."""

import unirl


@unirl.reward("brevity", components=("chars",))
def brevity(sample: unirl.Sample, limit: int = 32) -> unirl.RewardResult:
    """1.0 for an empty completion, falling linearly to 0.0 at `limit` characters."""
    n = len(sample.completion)
    return unirl.RewardResult(score=max(0.0, 1.0 - n / limit), components={"chars": float(n)})
