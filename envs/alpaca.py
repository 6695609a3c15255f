"""The supplement's Alpaca document: the one definition that instruction tuning, DPO and
generation share.

A pair `(instruction, response)` is, token by token:

    [BOS]  Alpaca head (up to and including "### Response:" and its newline)  response  EOS

* `BOS` is the tokenizer's begin-of-sequence token where the tokenizer puts one before a text
  it encodes with its special tokens (Llama 3's `<|begin_of_text|>`, 128000), and nothing where
  it does not (Qwen's tokenizer adds no special token);
* the head is `envs/prompts/alpaca_sft.prompt` cut at `{response}`, with the instruction in
  it, tokenized without special tokens; the response is tokenized without special tokens too
  (the prompt and the response apart, as `reasoning_core.tokenize_prompt_and_output` and the
  handout's DPO concatenation `x ⊕ y` have it);
* `EOS` is the tokenizer's end-of-sequence token, right after the response: no newline between
  them (the template file's own final newline is not part of a document).

Packing (`envs.packed_data`) concatenates these documents; DPO (`per_instance_dpo`, `rrl dpo`
with `pair_template: alpaca`) scores the response part of them; the generation commands give
the engine the prompt part (`alpaca_prompt_ids`, through `engine_prompt`), so that a model sees at generation exactly
the prefix it was trained on.

Tokenizing the head and the response apart gives the same ids as tokenizing the whole filled
template at once (the handout's reference packing) whenever the response does not begin with a
line break: the head ends with a line break, and Llama 3's and Qwen's pre-tokenizers start a
new piece after it unless another line break follows.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from envs.base import load_prompt, render

TEMPLATE = "alpaca_sft"


def _head_and_tail(template: str) -> tuple[str, str]:
    text = load_prompt(template)
    head, found, tail = text.partition("{response}")
    if not found:
        raise ValueError(f"prompt template {template!r} has no {{response}} placeholder")
    return head, tail


def alpaca_prompt(instruction: str, template: str = TEMPLATE) -> str:
    """`instruction` in the Alpaca template, up to and including `### Response:` and its
    newline: the response follows directly."""
    return render(_head_and_tail(template)[0], {"instruction": instruction})


def alpaca_text(instruction: str, response: str, template: str = TEMPLATE) -> str:
    """The template filled with one pair, ending with the response (no final newline)."""
    return alpaca_prompt(instruction, template) + response


def tokenizer_adds_bos(tokenizer: Any) -> bool:
    """True when `tokenizer` puts its BOS before a text it encodes with special tokens."""
    bos_id = getattr(tokenizer, "bos_token_id", None)
    if bos_id is None:
        return False
    with_special = list(tokenizer("x")["input_ids"])
    plain = list(tokenizer("x", add_special_tokens=False)["input_ids"])
    return with_special[:1] == [bos_id] and plain[:1] != [bos_id]


def bos_ids(tokenizer: Any) -> list[int]:
    """`[bos_token_id]` where the tokenizer adds a BOS (`tokenizer_adds_bos`), else `[]`."""
    return [int(tokenizer.bos_token_id)] if tokenizer_adds_bos(tokenizer) else []


def _encode(tokenizer: Any, text: str) -> list[int]:
    return [int(t) for t in tokenizer(text, add_special_tokens=False)["input_ids"]]


def _eos_id(tokenizer: Any) -> int:
    eos = getattr(tokenizer, "eos_token_id", None)
    if eos is None:
        raise ValueError("the tokenizer has no EOS token to end an Alpaca document with")
    return int(eos)


class AlpacaDocument(NamedTuple):
    """The token ids of one document and how many of them are the prompt's."""

    ids: list[int]
    prompt_length: int

    @property
    def prompt_ids(self) -> list[int]:
        """BOS (where the tokenizer adds one) and the Alpaca head."""
        return self.ids[: self.prompt_length]

    @property
    def response_ids(self) -> list[int]:
        """The response's tokens and the EOS token."""
        return self.ids[self.prompt_length :]


def alpaca_prompt_ids(tokenizer: Any, instruction: str, template: str = TEMPLATE) -> list[int]:
    """The prompt part of every document of `instruction`: BOS (where the tokenizer adds one)
    and the Alpaca head."""
    return bos_ids(tokenizer) + _encode(tokenizer, alpaca_prompt(instruction, template))


def alpaca_document(
    tokenizer: Any, instruction: str, response: str, template: str = TEMPLATE
) -> AlpacaDocument:
    """The document of one pair: `alpaca_prompt_ids`, the response's tokens, EOS."""
    prompt = alpaca_prompt_ids(tokenizer, instruction, template)
    ids = prompt + _encode(tokenizer, response) + [_eos_id(tokenizer)]
    return AlpacaDocument(ids, len(prompt))


def engine_prompt(tokenizer: Any, text: str, *, engine_adds_bos: bool) -> str:
    """`text` as a generation engine must receive it to encode BOS (where the tokenizer adds
    one) + `text`'s tokens: for the Alpaca head, exactly `alpaca_prompt_ids`.

    The hf and static engines encode a prompt without special tokens (a special token written
    in the text stays one token); vLLM encodes it with them, adding the BOS where the tokenizer
    adds one (`engine_adds_bos`). So the BOS is written out in the text where the tokenizer adds
    one and the engine does not."""
    if tokenizer_adds_bos(tokenizer) and not engine_adds_bos:
        return str(tokenizer.bos_token) + text
    return text
