"""Every relative link and every repository path that README.md, ARCHITECTURE.md and docs/*.md
name exists, so a document cannot point at a file that was moved or deleted.

How a document is read:

- Fenced code blocks are left out: they hold commands and their output, whose paths are
  often what a run will create (``results/default/grpo/lr~3e-4/seed~1/done.json``).
- A Markdown link or image ``[text](target)`` must resolve, relative to the document's
  folder, to a file or folder of the repository; web addresses (``scheme:``) are not
  followed. A ``#fragment`` must name a heading of the target (GitHub's anchor rule).
- An inline code span is taken for a repository path when it is one word of path characters
  (letters, digits, ``._-~/``) holding a ``/`` whose first part is a top-level entry of the
  repository (``benchmarks/``, ``workflow/``, ...), so that module names, settings, commands
  and paths relative to a run folder (``sft/default``, ``generations/``) are left alone.
  Patterns are skipped by that rule too (``*``, ``{a,b}``, ``<run>``, ``…`` are no path
  characters).
- Under ``results/``, what a run creates but the repository does not keep (``done.json``,
  ``checkpoint/``, ``state/``, ``generations/``, the HTML report) is skipped.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from project_root import ROOT

DOCUMENTS = sorted([ROOT / "README.md", ROOT / "ARCHITECTURE.md", *(ROOT / "docs").glob("*.md")])
FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.DOTALL | re.MULTILINE)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE = re.compile(r"(`+)(.+?)\1", re.DOTALL)
PATH = re.compile(r"[\w.~-]+(?:/[\w.~-]+)*/?")
RUN_MADE = {"done.json", "checkpoint", "state", "generations", "report.html", "logs"}


def _tracked_top_level() -> set[str]:
    try:
        files = subprocess.run(
            ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):  # not a checkout: what is on disk
        return {p.name for p in ROOT.iterdir() if not p.name.startswith(".git")}
    return {f.split("/", 1)[0] for f in files}


TOP = _tracked_top_level()


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but ``-`` and ``_`` dropped (code
    backticks with it), spaces to ``-``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    body = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", body, re.M)}


def prose(path: Path) -> str:
    return FENCE.sub("", path.read_text(encoding="utf-8"))


def broken_links(path: Path) -> list[str]:
    out = []
    for match in LINK.finditer(prose(path)):
        target = match.group(1)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file, _, fragment = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            out.append(f"{target} (no such file)")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            out.append(f"{target} (no heading #{fragment} in {dest.name})")
    return out


def named_paths(text: str) -> list[str]:
    """The inline code spans of ``text`` that name a repository path (module docstring)."""
    out = []
    for match in CODE.finditer(text):
        span = match.group(2).strip()
        if "/" not in span or not PATH.fullmatch(span):
            continue
        parts = span.rstrip("/").split("/")
        if parts[0] not in TOP:
            continue
        if parts[0] == "results" and RUN_MADE & set(parts):
            continue
        out.append(span)
    return out


def missing_paths(path: Path) -> list[str]:
    return [p for p in named_paths(prose(path)) if not (ROOT / p.rstrip("/")).exists()]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_and_named_paths_exist(document):
    problems = broken_links(document) + [f"`{p}` (no such path)" for p in missing_paths(document)]
    assert not problems, f"{document.relative_to(ROOT)}:\n" + "\n".join(problems)


def test_the_rules_pick_paths_and_leave_the_rest():
    text = (
        "`tools/readme_tables.py` `workflow/config/*.yaml` `sft/default` `rrl grpo` "
        "`results/default/grpo/default/seed~0/done.json` `reasoning_core.runtime.cli` "
        "`results/default/<run>/seed~<N>/` `docs/nowhere.md`\n```\n`envs/missing.py`\n```\n"
    )
    assert named_paths(FENCE.sub("", text)) == ["tools/readme_tables.py", "docs/nowhere.md"]
    assert slug("How our r1_zero grader differs from the handout's") == (
        "how-our-r1_zero-grader-differs-from-the-handouts"
    )
    assert slug("## `rrl tiny-world`".lstrip("# ")) == "rrl-tiny-world"
    assert slug("The pieces (Snakemake)") == "the-pieces-snakemake"


def test_a_broken_link_and_a_missing_path_are_found(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(
        "# Title\n[ok](doc.md#title) [bad](gone.md) [anchor](#nowhere) `benchmarks/gone.py`\n"
    )
    links = broken_links(doc)
    assert len(links) == 2
    assert links[0] == "gone.md (no such file)"
    assert links[1].startswith("#nowhere (no heading #nowhere")
    assert missing_paths(doc) == ["benchmarks/gone.py"]
