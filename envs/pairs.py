"""Preference pairs ``{prompt, chosen, rejected}``: a JSONL file of them, and Anthropic HH.

* :func:`read_pairs` reads a JSONL(.gz) file of ``{"prompt", "chosen", "rejected"}`` records
  (other fields kept), every record checked: a bad one raises :class:`envs.DataError`
  ``"FILE:LINE: ..."`` naming the field.
* :func:`load_hh` reads the Anthropic HH training files (Bai et al. 2022,
  ``Anthropic/hh-rlhf`` on Hugging Face: ``harmless-base``, ``helpful-base``,
  ``helpful-online``, ``helpful-rejection-sampled``, each ``train.jsonl.gz``) as the CS336
  supplement processes them: multi-turn conversations dropped (the human speaks more than
  once), the first human message as the instruction (``prompt``), the assistant's reply in
  the chosen and in the rejected conversation as ``chosen`` and ``rejected``, and ``source``,
  the file the pair came from.

``prompt`` is the text the policy is conditioned on as it stands; the DPO trainer's setting
``pair_template`` wraps it (``alpaca`` for HH) when it is a bare instruction.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from envs.base import DataError, read_jsonl, require

PAIR_FIELDS = ("prompt", "chosen", "rejected")
HH_SUBSETS = ("harmless-base", "helpful-base", "helpful-online", "helpful-rejection-sampled")
_TURN = re.compile(r"\n\n(Human|Assistant):")


def read_pairs(path: str | Path) -> list[dict]:
    """The ``{prompt, chosen, rejected}`` records of a JSONL(.gz) file, in order.

    Each field must be a non-empty string; ``chosen`` and ``rejected`` must differ (a pair of
    equal responses has no preference). Raises ``DataError`` ("FILE:LINE: ...") for a missing
    or empty file, a line that is not a JSON object and a bad record."""
    pairs = []
    for lineno, record in read_jsonl(path):
        for key in PAIR_FIELDS:
            require(record, key, str, path, lineno, nonempty=True)
        if record["chosen"] == record["rejected"]:
            raise DataError(path, lineno, "fields 'chosen' and 'rejected' are the same response")
        pairs.append(record)
    return pairs


def conversation_turns(text: str) -> list[tuple[str, str]]:
    """``[(speaker, message), ...]`` of an HH conversation (``"\\n\\nHuman: ...\\n\\nAssistant:
    ..."``), messages stripped; text before the first turn marker is dropped."""
    parts = _TURN.split(text)
    return [(parts[i], parts[i + 1].strip()) for i in range(1, len(parts) - 1, 2)]


def hh_pair(record: dict, path: str | Path, lineno: int) -> dict | None:
    """The pair of one HH record, or None when it is multi-turn (either conversation has more
    than one human message) or the two conversations do not share their prompt."""
    chosen = conversation_turns(require(record, "chosen", str, path, lineno))
    rejected = conversation_turns(require(record, "rejected", str, path, lineno))
    for turns in (chosen, rejected):
        speakers = [speaker for speaker, _ in turns]
        if speakers != ["Human", "Assistant"]:
            return None
    if chosen[0][1] != rejected[0][1]:
        return None
    return {"prompt": chosen[0][1], "chosen": chosen[1][1], "rejected": rejected[1][1]}


def hh_file(folder: str | Path, subset: str) -> Path:
    """The file of ``subset`` in ``folder``: ``{subset}.jsonl.gz`` (the supplement's layout),
    ``{subset}.jsonl`` or ``{subset}/train.jsonl.gz`` (Hugging Face's)."""
    folder = Path(folder)
    candidates = [
        folder / f"{subset}.jsonl.gz",
        folder / f"{subset}.jsonl",
        folder / subset / "train.jsonl.gz",
        folder / subset / "train.jsonl",
    ]
    for path in candidates:
        if path.is_file():
            return path
    raise DataError(folder, None, f"no HH file for {subset!r} (looked for {candidates[0].name}, "
                    f"{candidates[1].name}, {subset}/train.jsonl.gz)")  # fmt: skip


def load_hh(folder: str | Path, subsets: Iterable[str] = HH_SUBSETS) -> tuple[list[dict], dict]:
    """The single-turn pairs of the HH training files under ``folder``, file by file in the
    order of ``subsets``, each pair with its ``source`` (the subset's name).

    Returns ``(pairs, counts)``: ``counts`` has, per subset, ``records`` read and ``pairs``
    kept (``hh/<subset>/records``, ``hh/<subset>/pairs``). Raises ``DataError`` for a missing
    file or a record without string ``chosen``/``rejected`` fields (naming file and line)."""
    pairs: list[dict] = []
    counts: dict[str, int] = {}
    for subset in subsets:
        if subset not in HH_SUBSETS:
            raise ValueError(f"unknown HH subset {subset!r}; expected some of {HH_SUBSETS}")
        path = hh_file(folder, subset)
        records = kept = 0
        for lineno, record in read_jsonl(path):
            records += 1
            pair = hh_pair(record, path, lineno)
            if pair is not None:
                pairs.append({**pair, "source": subset})
                kept += 1
        counts[f"hh/{subset}/records"] = records
        counts[f"hh/{subset}/pairs"] = kept
    return pairs, counts
