"""The mutant list stays applicable as the code moves: every snippet is found exactly once in
its file and every named test file exists (run_mutants.load_mutants checks both)."""

from pathlib import Path

from project_root import ROOT, load_script


def load_runner():
    return load_script(Path(__file__).with_name("run_mutants.py"))


def test_every_mutant_applies_to_the_current_code():
    runner = load_runner()
    mutants = runner.load_mutants(root=ROOT)
    assert len(mutants) >= 50
    assert {m["part"] for m in mutants} == set(runner.PARTS)
    for m in mutants:
        source = (ROOT / m["file"]).read_text()
        mutated = source.replace(m["original"], m["replacement"], 1)
        assert mutated != source, m["id"]
