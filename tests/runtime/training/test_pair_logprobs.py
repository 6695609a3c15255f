"""The handout's per-instance DPO loss against a hand computation on a tiny model."""

import copy
import math

import torch
from tiny_model import EOS, build_model, build_tokenizer

from envs.alpaca import alpaca_prompt
from reasoning_core.runtime.training.pair_logprobs import per_instance_dpo

PROMPT = "what is 12 * 4?"
CHOSEN = "12 * 4 = 48"
REJECTED = "12 * 4 = 7"


def _models():
    tokenizer = build_tokenizer()
    lm = build_model(len(tokenizer), seed=1).train()
    ref = build_model(len(tokenizer), seed=2).eval()
    return lm, ref, tokenizer


def _by_hand(model, tokenizer, response):
    """log pi(response + EOS | Alpaca prompt): one forward over the joined ids, the response
    tokens' log-softmax entries summed in a Python loop."""
    prompt_ids = tokenizer(alpaca_prompt(PROMPT), add_special_tokens=False)["input_ids"]
    response_ids = tokenizer(response, add_special_tokens=False)["input_ids"]
    response_ids = response_ids + [tokenizer.convert_tokens_to_ids(EOS)]
    ids = torch.tensor([prompt_ids + response_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].double()
    total = 0.0
    for k, token in enumerate(response_ids):
        position = len(prompt_ids) + k - 1  # the logits that predict this token
        total += float(torch.log_softmax(logits[position], dim=-1)[token])
    return total


def test_alpaca_prompt_is_the_handout_template():
    assert alpaca_prompt("Say hi.") == (
        "Below is an instruction that describes a task. Write a response that appropriately "
        "completes the request.\n\n### Instruction:\nSay hi.\n\n### Response:\n"
    )


def test_per_instance_dpo_matches_the_hand_computation():
    lm, ref, tokenizer = _models()
    beta = 0.5
    loss = per_instance_dpo(lm, ref, tokenizer, beta, PROMPT, CHOSEN, REJECTED)
    margin = beta * (
        (_by_hand(lm, tokenizer, CHOSEN) - _by_hand(ref, tokenizer, CHOSEN))
        - (_by_hand(lm, tokenizer, REJECTED) - _by_hand(ref, tokenizer, REJECTED))
    )
    want = -math.log(1.0 / (1.0 + math.exp(-margin)))
    assert abs(margin) > 1e-3  # two different models: the test is not the log 2 case
    assert math.isclose(float(loss.detach()), want, rel_tol=1e-4, abs_tol=1e-5)
    assert loss.dim() == 0 and loss.device == next(lm.parameters()).device


def test_the_policy_gets_the_gradient_and_the_reference_none():
    lm, ref, tokenizer = _models()
    ref_before = copy.deepcopy(ref.state_dict())
    loss = per_instance_dpo(lm, ref, tokenizer, 0.1, PROMPT, CHOSEN, REJECTED)
    loss.backward()
    assert all(p.grad is None for p in ref.parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in lm.parameters())
    assert all(torch.equal(v, ref_before[k]) for k, v in ref.state_dict().items())


def test_same_model_as_reference_gives_log_two():
    lm, _, tokenizer = _models()
    loss = per_instance_dpo(lm, copy.deepcopy(lm), tokenizer, 0.1, PROMPT, CHOSEN, REJECTED)
    assert math.isclose(float(loss.detach()), math.log(2.0), rel_tol=1e-6)


def test_a_reference_in_another_dtype_returns_the_loss_in_the_policys():
    # A stand-in for "on another device": the reference's log-probs are moved to the policy's
    # device and dtype before the loss.
    lm, ref, tokenizer = _models()
    loss = per_instance_dpo(lm, ref.double(), tokenizer, 0.1, PROMPT, CHOSEN, REJECTED)
    assert loss.dtype == torch.float32 and torch.isfinite(loss)


def test_with_llama3_the_loss_is_the_handouts_formula_on_the_bos_prefixed_documents(tmp_path):
    """The supplement's formula: log pi(x + y_w) - log pi(x + y_l), each the whole sequence's
    log-prob, over the token ids of the Alpaca documents, BOS first where the tokenizer adds
    one (Llama 3's does); the prompt's log-prob cancels in the difference."""
    from tiny_llama import llama3_tokenizer, save_tiny_llama
    from transformers import AutoModelForCausalLM

    from envs.alpaca import alpaca_document

    tokenizer = llama3_tokenizer()
    lm = AutoModelForCausalLM.from_pretrained(save_tiny_llama(tmp_path / "a", seed=1)).train()
    ref = AutoModelForCausalLM.from_pretrained(save_tiny_llama(tmp_path / "b", seed=2)).eval()

    def whole(model, response):
        ids = alpaca_document(tokenizer, PROMPT, response).ids
        assert ids[0] == tokenizer.bos_token_id
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids])).logits[0].double()
        return sum(float(torch.log_softmax(logits[k - 1], -1)[ids[k]]) for k in range(1, len(ids)))

    beta = 2.0
    margin = beta * (
        (whole(lm, CHOSEN) - whole(ref, CHOSEN)) - (whole(lm, REJECTED) - whole(ref, REJECTED))
    )
    want = -math.log(1.0 / (1.0 + math.exp(-margin)))
    loss = per_instance_dpo(lm, ref, tokenizer, beta, PROMPT, CHOSEN, REJECTED)
    assert abs(margin) > 1e-3
    assert math.isclose(float(loss.detach()), want, rel_tol=1e-4, abs_tol=1e-5)
