"""Named random streams (reasoning_core.runtime.run.rng)."""

from __future__ import annotations


def test_rng_streams_keep_the_numbers_every_saved_run_was_drawn_with():
    """The named streams are the bare keys the trainers used before they had names: a step's
    draws are those of ``default_rng([seed, number, *keys])``."""
    import numpy as np

    from reasoning_core.runtime.run.rng import Stream, step_rng, step_seed

    assert {s.name: int(s) for s in Stream} == {
        "QUESTIONS": 1,
        "ROLLOUT_SEED": 2,
        "GRPO_ORDER": 3,
        "EI_ORDER": 4,
        "DPO_ORDER": 5,
        "DPO_VAL": 6,
        "REWARD_CONTROL": 7,
        "ROLLOUT_GROUP": 8,
        "SFT_SUBSET": 10,
        "SFT_ORDER": 11,
        "PACKED_ORDER": 12,
    }
    for stream in Stream:
        want = np.random.default_rng([7, int(stream), 2, 1]).permutation(20).tolist()
        assert step_rng(7, stream, 2, 1).permutation(20).tolist() == want
    want = int(np.random.default_rng([7, 2, 5]).integers(0, 2**31 - 1))
    assert step_seed(7, Stream.ROLLOUT_SEED, 5) == want
