"""What the tiny world is made of: the answer styles and layouts of its corpus, and the
settings of ``rrl tiny-world`` (:class:`TinyWorldConfig`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from reasoning_core.runtime.errors import ConfigError

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
    """Seed of the corpus, the tokenizer's training documents, the initial weights and the
    batches: another seed builds another base model."""
    # pretraining
    steps: int = 2000
    """Pretraining steps. Fewer give a base whose zero-shot accuracy varies more between seeds
    (docs/benchmarks.md, study speed)."""
    batch_size: int = 32
    """Documents per pretraining step."""
    lr: float = 2e-3
    """Peak learning rate of AdamW."""
    betas: list[float] = field(default_factory=lambda: [0.9, 0.98])
    """AdamW's (beta1, beta2)."""
    weight_decay: float = 0.01
    """AdamW's weight decay, on matrices only (not on norms and biases)."""
    warmup_steps: int = 30
    """Steps of linear warm-up."""
    min_lr_ratio: float = 0.1
    """The cosine schedule ends at lr * min_lr_ratio."""
    grad_clip: float = 1.0
    """Clip the gradient to this global L2 norm."""
    log_every: int = 10
    """Write a loss line to metrics.jsonl every N steps."""
    num_threads: int = 2
    """torch threads. Two: no other job of the study runs while the base model builds, and a
    pretraining step of this size gains from the second thread (docs/benchmarks.md, threads).
    The rounding differs from one thread's, so the base is another one."""
    length_buckets: int = 1
    """Draw each batch from a pool of this many batches' documents sorted by length, so a
    batch pads less. 1: the stream's order. Not the default: the faster base evaluated far
    lower zero-shot (docs/benchmarks.md, study speed)."""
    attention: str = "causal"
    """Attention mask of the right-padded batches: padding passes it; causal passes none
    (causal attention never lets a real token see the padding after it, and padding is not
    scored): the same loss up to rounding, a faster attention path."""
    # corpus
    r1_fraction: float = 0.8
    """Share of documents that start with the r1_zero prompt (the rest use other layouts)."""
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
    """Weights of the answer styles after the r1_zero prompt for problems of fewer than
    long_steps steps; only tags_chain passes the r1_zero format check."""
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
    """The same for problems of long_steps steps or more, which favour the passing style, so
    that a base model behaves differently on different problems as a real one does; empty:
    r1_styles for all."""
    long_steps: int = 3
    """Problems with at least this many steps take r1_styles_long."""
    other_layouts: dict[str, float] = field(
        default_factory=lambda: {"qa": 1.0, "q_a_hash": 1.0, "inline": 1.0, "boxed": 0.5}
    )
    """Weights of the layouts without the r1_zero prompt (boxed: the bare question, then the
    answer in \\boxed{}, which the question_only prompt looks for)."""
    wrong_fraction: float = 0.2
    """Share of documents in which one step is off by 1 or 2, the error carried to the
    answer."""
    # tokenizer
    tokenizer_docs: int = 20_000
    """Documents the byte-level BPE tokenizer is trained on."""
    # model
    vocab_size: int = 512
    """Most tokens in the tokenizer's vocabulary."""
    hidden_size: int = 128
    """Width of the Qwen2 model."""
    num_layers: int = 4
    """Transformer layers."""
    num_heads: int = 4
    """Attention heads."""
    num_kv_heads: int = 2
    """Key/value heads (grouped-query attention)."""
    head_dim: int = 32
    """Width of one attention head."""
    intermediate_size: int = 512
    """Width of the MLP's hidden layer."""
    max_position_embeddings: int = 256
    """Longest sequence the model takes, in tokens."""

    def validate(self) -> None:
        def bad(name: str, why: str) -> ConfigError:
            return ConfigError(f"setting {name!r} {why}")

        sizes = ("vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads")
        sizes += ("head_dim", "intermediate_size", "max_position_embeddings")
        for name in ("steps", "batch_size", "log_every", "num_threads", "tokenizer_docs", *sizes):
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
