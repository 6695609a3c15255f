"""What one optimizer step is made of, shared by every trainer.

- :mod:`.settings`: ``CommonConfig`` and ``RolloutConfig``, the settings every trainer shares,
  and their checks.
- :mod:`.policy`: device, threads, attention, loading the policy, AdamW and the lr schedule.
- :mod:`.rollouts`: ``Rollouts`` and ``sample_and_grade`` (a rollout batch through an engine,
  graded by the task's reward), and every ``SamplingParams`` a run builds.
- :mod:`.batching`: tokenized batches, micro batches, the OOM back-off, policy log-probs.
- :mod:`.updates`: ``sft_update`` and ``grpo_update`` (zero, accumulate, clip, step, schedule in
  the open), the old log-probs and the no-gradient scoring pass.
- :mod:`.engine_check`: the engine's log-probs against the policy's (the mismatch check, TIS).
- :mod:`.pair_logprobs`: sequence log-probs of preference pairs (DPO).

May import: the core, :mod:`envs`, :mod:`..errors`, :mod:`..settings`, :mod:`..distributed`,
:mod:`..run`, :mod:`..engines`. Not evaluation or trainers.
"""
