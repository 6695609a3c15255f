"""How often batch padding's float differences change a sampled token (the HF engine, CPU).

``rollout_seeding: batch`` samples a step's groups in one engine call, left-padded to the
longest prompt; ``group`` samples each group alone. The padding changes the shapes of the
matrix products, so the logits of the same sequence differ in the last bits. This measures by
how much, and whether it changes tokens:

- greedy decoding (temperature 0) of each prompt alone and of all of them in one padded call:
  how many prompts' responses differ (an argmax flipped somewhere), and on the tokens both
  calls produced identically, the largest and mean absolute difference of their log-probs;
- under sampling a draw flips only when its uniform number lands within about that difference
  of a boundary of the cumulative distribution: the mean difference is an estimate of the
  chance per token.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/padding_flips.py --model workflow/resources/tiny_world
"""

from __future__ import annotations

import argparse
import os
import statistics

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

import envs  # noqa: E402
from reasoning_core.runtime.engines import make_engine  # noqa: E402
from reasoning_core.runtime.engines.rollout import SamplingParams  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=48)
    args = parser.parse_args()
    torch.set_num_threads(1)
    task = envs.get_task("arithmetic")
    questions = task.load("train", limit=args.prompts)
    prompts = [task.format_prompt(q, "r1_zero") for q in questions]
    engine = make_engine("hf", args.model, None, max_batch_size=args.prompts)
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens, stop=["</answer>"])
    together = [group[0] for group in engine.generate(prompts, params)]
    alone = [engine.generate([p], params)[0][0] for p in prompts]
    lengths = {len(engine.tokenizer(p)["input_ids"]) for p in prompts}
    differ, diffs, tokens = 0, [], 0
    for a, b in zip(alone, together, strict=True):
        differ += a.token_ids != b.token_ids
        for ta, tb, la, lb in zip(a.token_ids, b.token_ids, a.logprobs, b.logprobs, strict=False):
            if ta != tb:
                break
            diffs.append(abs(la - lb))
            tokens += 1
    print(
        f"{args.prompts} prompts ({min(lengths)}-{max(lengths)} prompt tokens), greedy, "
        f"up to {args.max_tokens} tokens"
    )
    print(f"responses that differ between alone and padded in one call: {differ}")
    print(
        f"|log-prob difference| on {tokens} identical tokens: max {max(diffs):.2e}, "
        f"mean {statistics.fmean(diffs):.2e} (exactly 0 on {sum(d == 0 for d in diffs)})"
    )


if __name__ == "__main__":
    main()
