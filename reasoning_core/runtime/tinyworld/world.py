"""What the tiny world is made of: the answer styles and layouts of its corpus, and the
settings of ``rrl tiny-world`` (:class:`TinyWorldConfig`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from reasoning_core.runtime.config import ConfigError

EOS = "<|endoftext|>"
TAGS = ("<think>", "</think>", "<answer>", "</answer>")

# Answer styles after an r1_zero prompt (which ends in "<think>"). Only `tags_chain` passes
# the r1_zero format check ("</think> <answer>" ... "</answer>").
R1_STYLES: dict[str, str] = {
    "tags_chain": " {chain} </think> <answer> {answer} </answer>",
    "tags_tight": "</think><answer>{answer}</answer>",
    "chain_plain": " {chain} The answer is {answer}.",
    "hashes": "</think> #### {answer}",
    "plain": "</think> The answer is {answer}.",
    "tags_newline": "</think>\n<answer> {answer} </answer>",
}
PASSING_STYLE = "tags_chain"

# Documents without the r1_zero prompt.
OTHER_LAYOUTS: dict[str, str] = {
    "qa": "Question: {question}\nAnswer: {chain} So the answer is {answer}.",
    "q_a_hash": "Q: {question}\nA: {chain} #### {answer}",
    "inline": "{question} {chain} So the answer is {answer}.",
    # The question alone, then a boxed answer: what the question_only prompt ("{question}")
    # and its reward (the last \\boxed{}) look for. Without it the base model never boxes an
    # answer and the prompt ablation has nothing to learn from.
    "boxed": "{question} {chain} So the answer is \\boxed{{answer}}.",
}


@dataclass
class TinyWorldConfig:
    """Settings of ``rrl tiny-world`` (section ``tiny-world:`` of the config file)."""

    seed: int = 0
    # pretraining
    steps: int = 2000
    batch_size: int = 32
    lr: float = 2e-3
    betas: list[float] = field(default_factory=lambda: [0.9, 0.98])
    weight_decay: float = 0.01
    warmup_steps: int = 30
    min_lr_ratio: float = 0.1
    grad_clip: float = 1.0
    log_every: int = 10
    # Two torch threads: no other job runs while the base model builds; measured 2.06x per step
    # on a 2-core machine (benchmarks/study_speed.txt). The rounding is not one thread's: equal
    # over the benchmark's 6 steps, the 2,000-step base differs from step 10 on (loss
    # 5.72825937 against 5.72825942) and evaluates at 18.6% zero-shot, not 23.4% (HF engine).
    num_threads: int = 2
    # Batches drawn from a pool of `length_buckets` batches' documents sorted by length (the
    # pool cut into batches of near-equal lengths, their order shuffled): less padding computed
    # (30% of a step's tokens at 1, 3% at 16; 1.35x per one-thread step). 1: the stream's
    # order. Not the default: at 16 the base fell to 10.4% zero-shot accuracy (30.5% format),
    # against 22.9% (34.6%) at 1, likely because a batch's loss is a mean over its tokens, so
    # batches of long documents (the multi-step problems) weigh less per token.
    length_buckets: int = 1
    # The attention mask of the right-padded batches: "padding" passes it; "causal" passes none
    # (every real token precedes the padding of its row, which causal attention never lets it
    # see, and padding is not scored): the same loss up to rounding, a faster attention path.
    # 1.07x per one-thread step (benchmarks/study_speed.txt); the base built with it (two
    # threads) evaluates at 22.9% zero-shot, 34.6% format.
    attention: str = "causal"
    # corpus
    r1_fraction: float = 0.8
    # Answer-style weights after the r1_zero prompt for short problems (fewer than
    # `long_steps` steps) and, in `r1_styles_long`, for long ones. Long problems are worked
    # step by step (and in the passing style) more often, so that sampling passes the format
    # about a third of the time while greedy decoding passes it on long problems only, as a
    # real base model behaves differently on different problems. Empty `r1_styles_long`:
    # `r1_styles` for all problems.
    r1_styles: dict[str, float] = field(
        default_factory=lambda: {
            "tags_chain": 0.25,
            "chain_plain": 0.10,
            "tags_tight": 0.15,
            "hashes": 0.10,
            "plain": 0.25,
            "tags_newline": 0.15,
        }
    )
    r1_styles_long: dict[str, float] = field(
        default_factory=lambda: {
            "tags_chain": 0.50,
            "chain_plain": 0.15,
            "tags_tight": 0.10,
            "hashes": 0.05,
            "plain": 0.10,
            "tags_newline": 0.10,
        }
    )
    long_steps: int = 3
    other_layouts: dict[str, float] = field(
        default_factory=lambda: {"qa": 1.0, "q_a_hash": 1.0, "inline": 1.0, "boxed": 0.5}
    )
    wrong_fraction: float = 0.2
    # tokenizer
    tokenizer_docs: int = 20_000
    # model
    vocab_size: int = 512
    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 32
    intermediate_size: int = 512
    max_position_embeddings: int = 256

    def validate(self) -> None:
        def bad(name: str, why: str) -> ConfigError:
            return ConfigError(f"setting {name!r} {why}")

        for name in ("steps", "batch_size", "log_every", "num_threads", "tokenizer_docs"):
            if getattr(self, name) < 1:
                raise bad(name, "must be >= 1")
        if self.warmup_steps < 0:
            raise bad("warmup_steps", "must be >= 0")
        if self.length_buckets < 1:
            raise bad("length_buckets", "must be >= 1")
        if self.attention not in ("padding", "causal"):
            raise bad("attention", f"must be 'padding' or 'causal', got {self.attention!r}")
        if not 0.0 <= self.r1_fraction <= 1.0:
            raise bad("r1_fraction", "must lie in [0, 1]")
        if not 0.0 <= self.wrong_fraction <= 1.0:
            raise bad("wrong_fraction", "must lie in [0, 1]")
        if len(self.betas) != 2:
            raise bad("betas", "must be a list of two numbers")
        tables = [
            ("r1_styles", self.r1_styles, R1_STYLES),
            ("other_layouts", self.other_layouts, OTHER_LAYOUTS),
        ]
        if self.r1_styles_long:
            tables.append(("r1_styles_long", self.r1_styles_long, R1_STYLES))
        for name, table, known in tables:
            unknown = sorted(set(table) - set(known))
            if unknown:
                raise bad(name, f"has unknown entries {unknown}; known: {sorted(known)}")
            if any(not isinstance(w, (int, float)) or w < 0 for w in table.values()):
                raise bad(name, "weights must be numbers >= 0")
            if sum(table.values()) <= 0:
                raise bad(name, "needs a positive total weight")
        if self.hidden_size != self.num_heads * self.head_dim:
            raise bad("hidden_size", "must equal num_heads * head_dim")
        if self.num_heads % self.num_kv_heads:
            raise bad("num_kv_heads", "must divide num_heads")
