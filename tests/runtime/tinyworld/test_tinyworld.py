"""The tiny world builder: a micro build (a few steps) loads, tokenizes and is reproducible."""

from __future__ import annotations

import json
import os
import random
import re

import pytest
import torch
from project_root import ROOT

from envs.arithmetic import TASK
from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.tinyworld import main
from reasoning_core.runtime.tinyworld.corpus import r1_zero_preamble
from reasoning_core.runtime.tinyworld.world import (
    OTHER_LAYOUTS,
    PASSING_STYLE,
    R1_STYLES,
    TAGS,
    TinyWorldConfig,
)

MICRO = ["steps=4", "batch_size=8", "tokenizer_docs=2000", "log_every=2"]


def set_args(pairs):
    return [a for p in pairs for a in ("--set", p)]


@pytest.fixture(scope="module")
def micro_world(tmp_path_factory):
    out = tmp_path_factory.mktemp("world")
    assert main([*set_args(MICRO), "--out", str(out)]) == 0
    return out


def test_folder_loads_with_transformers(micro_world):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(micro_world)
    tok = AutoTokenizer.from_pretrained(micro_world)
    assert model.config.model_type == "qwen2"
    assert model.config.head_dim == 32 and model.config.tie_word_embeddings
    assert 1_000_000 < sum(p.numel() for p in model.parameters()) < 1_100_000
    assert len(tok) <= model.config.vocab_size
    assert tok.eos_token == tok.pad_token == "<|endoftext|>"
    assert tok.eos_token_id == model.config.eos_token_id
    assert (micro_world / "model.safetensors").is_file()
    ids = tok("Ana has 3 coins.", return_tensors="pt").input_ids
    with torch.no_grad():
        logits = model(ids).logits
    assert logits.shape == (1, ids.shape[1], model.config.vocab_size)
    assert torch.isfinite(logits).all()


def test_prompt_round_trips_and_is_short(micro_world):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(micro_world)
    for ex in TASK.load("test", limit=20):
        prompt = TASK.format_prompt(ex, "r1_zero")
        ids = tok(prompt, add_special_tokens=False).input_ids
        assert tok.decode(ids) == prompt  # byte-identical text, compactly encoded
        assert 20 <= len(ids) <= 45, len(ids)
        assert ids[0] == tok.convert_tokens_to_ids(r1_zero_preamble())
        response = f" 5 + 3 = 8. 8 - 2 = 6. </think> <answer> {ex.ground_truth} </answer>"
        rids = tok(response, add_special_tokens=False).input_ids
        assert tok.decode(ids + rids) == prompt + response
    for tag in TAGS:
        assert len(tok(tag, add_special_tokens=False).input_ids) == 1
    assert tok.decode(tok("<think> x </think>").input_ids, skip_special_tokens=True) == (
        "<think> x </think>"
    )
    # Every token holds at most one digit.
    assert all(sum(c.isdigit() for c in t) <= 1 for t in tok.get_vocab())


def test_auto_tokenizer_reads_the_folder_as_trained(micro_world):
    """AutoTokenizer (as vLLM uses it) may rebuild the pipeline as Qwen2Tokenizer: it must
    tokenize exactly like the trained tokenizer.json."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    auto = AutoTokenizer.from_pretrained(micro_world)
    raw = Tokenizer.from_file(str(micro_world / "tokenizer.json"))
    texts = [TASK.format_prompt(e, "r1_zero") for e in TASK.load("test", limit=30)]
    texts += [t.reasoning + " The answer is " + t.answer + "." for t in TASK.traces("train", 30)]
    texts += ["Question: x\nAnswer: 10 - 3 = 7. #### 7", "caf\u00e9 \u00e9t\u00e9  12  ?!\n\n"]
    for text in texts:
        assert auto(text, add_special_tokens=False).input_ids == raw.encode(text).ids


def test_run_files(micro_world):
    lines = [json.loads(x) for x in (micro_world / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == [2, 4]
    assert all(r["split"] == "train" and r["loss"] > 0 for r in lines)
    done = json.loads((micro_world / "done.json").read_text())
    assert done["steps"] == 4
    import yaml

    cfg = yaml.safe_load((micro_world / "config.yaml").read_text())
    assert cfg["steps"] == 4 and cfg["hidden_size"] == 128


def test_same_seed_same_world(micro_world, tmp_path):
    assert main([*set_args(MICRO), "--out", str(tmp_path)]) == 0
    a = (micro_world / "model.safetensors").read_bytes()
    assert (tmp_path / "model.safetensors").read_bytes() == a
    strip = lambda p: [  # noqa: E731
        {k: v for k, v in json.loads(x).items() if not k.startswith("time/")}
        for x in (p / "metrics.jsonl").read_text().splitlines()
    ]
    assert strip(tmp_path) == strip(micro_world)


def test_defaults_have_one_passing_style():
    cfg = TinyWorldConfig()
    assert set(cfg.r1_styles) == set(R1_STYLES) and set(cfg.other_layouts) == set(OTHER_LAYOUTS)
    import envs

    fields = {"chain": "5 + 3 = 8.", "answer": "8"}
    passing = [
        name
        for name, style in R1_STYLES.items()
        if envs.r1_zero_reward_fn(style.format(**fields), "8")["format_reward"] == 1.0
    ]
    assert passing == [PASSING_STYLE]


@pytest.mark.parametrize(
    "pair, setting",
    [
        ("steps=0", "steps"),
        ("r1_styles={bogus: 1.0}", "r1_styles"),
        ("hidden_size=100", "hidden_size"),
        ("nonsense=1", "nonsense"),
    ],
)
def test_bad_settings_fail_before_any_work(tmp_path, capsys, pair, setting):
    assert main(["--set", pair, "--out", str(tmp_path / "w")]) == 2
    assert setting in capsys.readouterr().err
    assert not (tmp_path / "w").exists()


def test_config_error_is_a_config_error():
    with pytest.raises(ConfigError, match="num_kv_heads"):
        TinyWorldConfig(num_kv_heads=3).validate()


@pytest.mark.vllm
def test_folder_loads_with_vllm_and_tokenizes_like_transformers(micro_world):
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import vllm
    from transformers import AutoTokenizer

    llm = vllm.LLM(
        model=str(micro_world),
        dtype="float32",
        max_model_len=256,
        kv_cache_memory_bytes=16 << 20,
        enforce_eager=True,
        seed=0,
    )
    try:
        tok = AutoTokenizer.from_pretrained(micro_world)
        prompts = [TASK.format_prompt(e, "r1_zero") for e in TASK.load("test", limit=8)]
        outs = llm.generate(prompts, vllm.SamplingParams(temperature=0.0, max_tokens=6))
        for prompt, out in zip(prompts, outs, strict=True):
            assert list(out.prompt_token_ids) == tok(prompt, add_special_tokens=False).input_ids
            assert len(out.outputs[0].token_ids) >= 1
    finally:
        del llm


def test_workflow_defaults_match_the_code_defaults():

    from reasoning_core.runtime.settings.config import build_config, load_yaml

    path = ROOT / "workflow/config/methods/tiny.yaml"
    assert build_config(TinyWorldConfig, load_yaml(path, "tiny-world")) == TinyWorldConfig()


def test_corpus_never_shows_a_test_problem():
    from reasoning_core.runtime.tinyworld.corpus import documents

    test_questions = [e.question for e in TASK.load("test")]
    docs = [p + r for p, r in documents(TinyWorldConfig(), 5000, seed=3)]
    text = "\n".join(docs)
    assert sum(d.startswith("A conversation") for d in docs) > 3000  # r1_fraction 0.8
    assert not any(q in text for q in test_questions)


def test_question_only_prompt_has_boxed_documents_to_learn_from():
    """Only the `boxed` layout continues a bare question the way question_only rewards."""
    import envs
    from envs.base import load_prompt, render
    from reasoning_core.runtime.tinyworld.corpus import documents

    fields = {"question": "Ana has 5 coins. How many coins does Ana have now?"}
    fields |= {"chain": "5 + 3 = 8.", "answer": "8"}
    prompt = render(load_prompt("question_only"), {"question": fields["question"]})
    rewarded = []
    for name, layout in OTHER_LAYOUTS.items():
        text = render(layout, fields)
        if text.startswith(prompt):
            reward = envs.question_only_reward_fn(text[len(prompt) :], "8")
            if reward["reward"] == 1.0:
                rewarded.append(name)
    assert rewarded == ["boxed"]
    # With the default weights about 0.2 * 0.5 / 3.5 of documents are boxed ones.
    docs = [r for p, r in documents(TinyWorldConfig(), 5000, seed=3) if not p]
    boxed = sum("\\boxed{" in r for r in docs)
    assert 80 < boxed < 220, boxed


def test_length_buckets_keep_every_document_once_in_batches_of_near_equal_length(micro_world):
    """length_bucketed: at 1 bucket, the stream's own batches in order; at 4, every document of
    each 4-batch pool once, each batch a slice of the pool sorted by length, the order of the
    batches shuffled (seeded), and far less padding than the stream's order."""
    import random

    from transformers import AutoTokenizer

    from reasoning_core.runtime.tinyworld.corpus import documents
    from reasoning_core.runtime.tinyworld.pretrain import encode_documents, length_bucketed

    tok = AutoTokenizer.from_pretrained(micro_world)
    cfg = TinyWorldConfig()
    docs = list(documents(cfg, 8 * 8, seed=5))
    seqs = encode_documents(tok, docs)
    plain = list(length_bucketed(iter(docs), tok, 8, 1, random.Random(0)))
    assert plain == [seqs[i : i + 8] for i in range(0, 64, 8)]

    def bucketed(seed):
        return list(length_bucketed(iter(docs), tok, 8, 4, random.Random(seed)))

    out = bucketed(0)
    assert out == bucketed(0) and len(out) == 8
    for pool in range(2):
        ours = out[4 * pool : 4 * pool + 4]
        expected = sorted(seqs[32 * pool : 32 * pool + 32], key=len)
        assert sorted(map(tuple, (s for b in ours for s in b))) == sorted(map(tuple, expected))
        slices = [expected[i : i + 8] for i in range(0, 32, 8)]
        assert sorted(ours, key=lambda b: len(b[0])) == slices  # shuffled whole slices
    assert any(
        out[i]
        != sorted(seqs[32 * (i // 4) : 32 * (i // 4) + 32], key=len)[8 * (i % 4) : 8 * (i % 4) + 8]
        for i in range(8)
    )  # the order is shuffled, not sorted

    def padding(batches):
        return sum(max(map(len, b)) * len(b) - sum(map(len, b)) for b in batches)

    assert padding(out) < padding(plain) / 2


def test_causal_attention_gives_the_padding_masks_loss(micro_world):
    """attention 'causal' passes no mask to the right-padded batch: the same loss as the
    padding mask (rounding aside), since no real token sees its row's padding."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from reasoning_core.runtime.tinyworld.corpus import documents
    from reasoning_core.runtime.tinyworld.pretrain import collate, encode_documents

    tok = AutoTokenizer.from_pretrained(micro_world)
    model = AutoModelForCausalLM.from_pretrained(micro_world)
    seqs = encode_documents(tok, list(documents(TinyWorldConfig(), 8, seed=5)))
    ids, mask, labels = collate(seqs, tok.pad_token_id)
    assert (mask == 0).any()
    with torch.no_grad():
        padded = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        causal = model(input_ids=ids, labels=labels).loss
    torch.testing.assert_close(causal, padded, rtol=1e-5, atol=1e-6)


def _documents(problems, **settings):
    from reasoning_core.runtime.tinyworld.corpus import make_document

    cfg = TinyWorldConfig(**settings)
    cfg.validate()
    rng = random.Random(0)
    return [make_document(p, cfg, rng, "{question}") for p in problems]


def test_corpus_chains_are_wrong_in_the_configured_share():
    """``wrong_fraction`` of the documents carry one step off by 1 or 2, so their final answer
    is not the problem's (the base must see wrong chains, like a real base model's data)."""
    problems = list(TASK.train_problems(2000, seed=5, distinct=False))
    tags = {"r1_fraction": 1.0, "r1_styles": {PASSING_STYLE: 1.0}, "r1_styles_long": {}}
    for fraction, low, high in [(0.0, 0.0, 0.0), (0.2, 0.17, 0.23), (0.5, 0.46, 0.54)]:
        docs = _documents(problems, wrong_fraction=fraction, **tags)
        answers = [int(re.search(r"<answer> (-?\d+) </answer>", r).group(1)) for _, r in docs]
        wrong = sum(a != p.values()[-1] for a, p in zip(answers, problems, strict=True))
        assert low <= wrong / len(problems) <= high, (fraction, wrong)


def test_long_problems_take_their_answer_styles_from_r1_styles_long():
    problems = list(TASK.train_problems(300, seed=6, distinct=False))
    docs = _documents(
        problems,
        r1_fraction=1.0,
        r1_styles={"plain": 1.0},
        r1_styles_long={PASSING_STYLE: 1.0},
        long_steps=3,
    )
    long = [len(p.steps) >= 3 for p in problems]
    assert 0 < sum(long) < len(long)
    for is_long, (_, response) in zip(long, docs, strict=True):
        assert ("<answer>" in response) == is_long, response


def test_learning_rate_warms_up_then_decays_to_min_lr_ratio():
    from reasoning_core.runtime.tinyworld.pretrain import lr_lambda

    cfg = TinyWorldConfig(steps=100, warmup_steps=10, min_lr_ratio=0.1)
    f = lr_lambda(cfg)
    assert [f(s) for s in (0, 4, 9)] == pytest.approx([0.1, 0.5, 1.0])
    after = [f(s) for s in range(10, 101)]
    assert after[0] == pytest.approx(1.0) and after[-1] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(after, after[1:], strict=False))
    assert f(1000) == pytest.approx(0.1)  # past the end: the floor


def test_weight_decay_on_matrices_only():
    from reasoning_core.runtime.tinyworld.model import build_model
    from reasoning_core.runtime.tinyworld.pretrain import make_optimizer

    cfg = TinyWorldConfig(hidden_size=64, num_heads=2, num_kv_heads=1, num_layers=1)
    model = build_model(cfg, eos_id=0)
    decay, no_decay = make_optimizer(model, cfg).param_groups
    assert decay["weight_decay"] == cfg.weight_decay > 0 and no_decay["weight_decay"] == 0.0
    assert decay["params"] and all(p.dim() >= 2 for p in decay["params"])
    assert no_decay["params"] and all(p.dim() == 1 for p in no_decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))
    assert decay["lr"] == cfg.lr and decay["betas"] == tuple(cfg.betas)


# ----------------------------------------------------------------------------- its --out folder


def _held(out, command):
    """Lock ``out`` as a running ``rrl <command>`` does (its marker's flock), from another
    open file, as another process would hold it."""
    import fcntl

    from reasoning_core.runtime.run.ownership import MARKER

    out.mkdir(parents=True, exist_ok=True)
    handle = open(out / MARKER, "a+", encoding="utf-8")  # noqa: SIM115 (closed by the caller)
    fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    handle.write(json.dumps({"command": command, "pid": 4242}) + "\n")
    handle.flush()
    return handle


def test_tiny_world_refuses_a_finished_or_running_grpo_folder(tmp_path, capsys):
    from reasoning_core.runtime import cli

    finished = tmp_path / "finished"
    handle = _held(finished, "grpo")
    (finished / "metrics.jsonl").write_text('{"step": 1, "split": "train"}\n')
    (finished / "done.json").write_text(json.dumps({"method": "grpo", "step": 1}))
    handle.close()
    assert cli.main(["tiny-world", *set_args(MICRO), "--out", str(finished)]) == 2
    assert "holds a finished `rrl grpo` run" in capsys.readouterr().err
    assert json.loads((finished / "done.json").read_text())["method"] == "grpo"
    assert (finished / "metrics.jsonl").read_text() == '{"step": 1, "split": "train"}\n'

    running = tmp_path / "running"
    handle = _held(running, "grpo")
    try:
        assert cli.main(["tiny-world", *set_args(MICRO), "--out", str(running)]) == 2
    finally:
        handle.close()
    assert "holds an unfinished `rrl grpo` run" in capsys.readouterr().err
    assert not (running / "config.yaml").exists()


def test_a_second_tiny_world_writer_is_refused(tmp_path, capsys):
    from reasoning_core.runtime import cli

    handle = _held(tmp_path / "w", "tiny-world")
    try:
        assert cli.main(["tiny-world", *set_args(MICRO), "--out", str(tmp_path / "w")]) == 2
    finally:
        handle.close()
    assert "being written by another rrl process (pid 4242)" in capsys.readouterr().err
    assert not (tmp_path / "w" / "config.yaml").exists()


def test_a_finished_tiny_world_is_kept_when_identical_and_refused_otherwise(micro_world, capsys):
    from reasoning_core.runtime import cli

    before = (micro_world / "model.safetensors").stat().st_mtime_ns
    assert cli.main(["tiny-world", *set_args(MICRO), "--out", str(micro_world)]) == 0
    assert "is already complete (done.json), with the same settings" in capsys.readouterr().err
    other = [*set_args(MICRO), "--set", "seed=1", "--out", str(micro_world)]
    assert cli.main(["tiny-world", *other]) == 2
    assert "seed 0 -> 1" in capsys.readouterr().err
    assert (micro_world / "model.safetensors").stat().st_mtime_ns == before


def test_tiny_world_into_a_folder_it_cannot_write_is_a_message(tmp_path, capsys):
    from reasoning_core.runtime import cli

    (tmp_path / "file").write_text("not a folder")
    out = tmp_path / "file" / "w"
    assert cli.main(["tiny-world", *set_args(MICRO), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"rrl tiny-world: --out {out}: cannot write there" in err
    assert "Traceback" not in err
