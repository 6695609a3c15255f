"""The README stays an overview: at most ``LIMIT`` words of prose, the detail in docs/.

Prose is what is left after fenced code blocks and table rows (lines starting with ``|``) are
taken out; words are what ``str.split`` splits it into (headings, list markers and inline code
count like any word). The same rule every time, so the count can be compared across versions.
"""

from __future__ import annotations

import re

from project_root import ROOT

LIMIT = 2500
FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.DOTALL | re.MULTILINE)


def prose_words(markdown: str) -> int:
    """Words of ``markdown`` outside fenced code blocks and table rows."""
    lines = FENCE.sub("", markdown).splitlines()
    return len(" ".join(line for line in lines if not line.lstrip().startswith("|")).split())


def test_prose_words_leaves_out_code_and_tables():
    text = (
        "# Title here\n\nTwo words.\n\n```bash\nnot counted at all\n```\n\n"
        "| a | b |\n|---|---|\n| c | d |\n\n- a `code span` counts\n"
    )
    assert prose_words(text) == 5 + 5  # "# Title here Two words." and "- a `code span` counts"


def test_readme_prose_is_under_the_limit():
    words = prose_words((ROOT / "README.md").read_text(encoding="utf-8"))
    assert 500 < words <= LIMIT, f"README.md has {words} words of prose (limit {LIMIT})"
