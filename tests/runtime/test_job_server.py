"""``rrl job-server``: jobs forked from a warm process behave as processes of their own.

The protocol tests serve a stand-in job function (no torch preloaded, so the server starts in
a fraction of a second); the last test serves real ``rrl`` commands and compares a run made
through the server with the same run made in a process of its own.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from micro_world import GRPO, SFT, read_metrics, sets
from project_root import ROOT

from reasoning_core.runtime.commands import COMMANDS
from reasoning_core.runtime.job_server import ENV, SERVED

# A server whose jobs run `job(argv)`: it prints to both streams, writes what it sees to the
# file named by its first argument, sleeps as long as its second says, and returns its third
# (or raises when that is "raise").
STAND_IN = textwrap.dedent(
    """
    import json, os, sys, time
    from reasoning_core.runtime.job_server import serve

    def job(argv):
        out, seconds, status = argv
        print("to stdout"); print("to stderr", file=sys.stderr)
        seen = {"cwd": os.getcwd(), "env": os.environ.get("MARK"), "argv": sys.argv,
                "server_env": os.environ.get("RRL_JOB_SERVER"), "pid": os.getpid(),
                "ppid": os.getppid()}
        with open(out, "w") as f:
            json.dump(seen, f)
        time.sleep(float(seconds))
        if status == "raise":
            raise RuntimeError("a bug in the job")
        if status == "exit-message":
            sys.exit("the job's own message")
        return int(status)

    parent = int(sys.argv[2]) if len(sys.argv) > 2 else None
    sys.exit(serve(sys.argv[1], job, parent=parent))
    """
)
ENV_BASE = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def wait_for(condition, seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped) counts as gone
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ")[1].startswith("Z"))


@pytest.fixture
def stand_in(tmp_path):
    socket_path = tmp_path / "s"
    server = subprocess.Popen(
        [sys.executable, "-c", STAND_IN, str(socket_path), str(os.getpid())], env=ENV_BASE
    )
    assert wait_for(socket_path.exists), "the stand-in server did not start"
    yield socket_path, server
    server.terminate()
    server.wait(timeout=30)


def request(
    socket_path: Path, *argv: str, cwd: Path, env_extra: dict | None = None, **popen
) -> subprocess.Popen:
    """``rrl <argv>`` with the server at ``socket_path`` (the stand-in takes any command name
    that ``rrl`` sends it: ``eval`` is one)."""
    env = {**ENV_BASE, ENV: str(socket_path), "MARK": "from the requester", **(env_extra or {})}
    code = "import sys; from reasoning_core.runtime.job_server import run_via_server; "
    code += "s = run_via_server(sys.argv[1], sys.argv[2:]); sys.exit(99 if s is None else s)"
    return subprocess.Popen(
        [sys.executable, "-c", code, str(socket_path), *argv], env=env, cwd=cwd, **popen
    )


def test_a_served_job_has_the_requesters_streams_folder_environment_and_status(stand_in, tmp_path):
    socket_path, server = stand_in
    work = tmp_path / "work"
    work.mkdir()
    out, err = work / "out.txt", work / "err.txt"
    with out.open("w") as stdout, err.open("w") as stderr:
        proc = request(socket_path, "seen.json", "0", "3", cwd=work, stdout=stdout, stderr=stderr)
        assert proc.wait(timeout=60) == 3
    assert out.read_text() == "to stdout\n"
    assert err.read_text() == "to stderr\n"
    seen = json.loads((work / "seen.json").read_text())  # a path relative to the requester's cwd
    assert seen["cwd"] == str(work)
    assert seen["env"] == "from the requester"
    assert seen["argv"] == ["rrl", "seen.json", "0", "3"]
    assert seen["server_env"] is None  # commands the job starts run in processes of their own
    assert seen["ppid"] == server.pid and seen["pid"] != proc.pid


def test_a_request_from_another_code_tree_is_refused_and_runs_where_it_was_made(stand_in, tmp_path):
    """A forked job would run the server's modules whatever the requester imports: a requester
    whose reasoning_core is another copy (another commit's tree on its PYTHONPATH, as
    tools/ab_commits.py runs) is refused, and its rrl runs the command itself."""
    socket_path, _ = stand_in
    other = tmp_path / "other"
    shutil.copytree(
        ROOT / "reasoning_core", other / "reasoning_core",
        ignore=shutil.ignore_patterns("__pycache__"),
    )  # fmt: skip
    work = tmp_path / "work"
    work.mkdir()
    proc = request(
        socket_path, "seen.json", "0", "3", cwd=work, stderr=subprocess.PIPE, text=True,
        env_extra={"PYTHONPATH": str(other)},
    )  # fmt: skip
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 99, err  # run_via_server answered None: not served
    assert "refused the job (it serves the code" in err and str(other) in err, err
    assert not (work / "seen.json").exists()


def test_a_jobs_bug_prints_its_traceback_to_the_requester_and_fails(stand_in, tmp_path):
    socket_path, _ = stand_in
    proc = request(socket_path, "seen.json", "0", "raise", cwd=tmp_path, stderr=subprocess.PIPE)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert b"RuntimeError: a bug in the job" in stderr and b"Traceback" in stderr


def test_a_jobs_exit_with_a_message_prints_it_and_fails_as_the_interpreter_does(stand_in, tmp_path):
    socket_path, _ = stand_in
    proc = request(
        socket_path, "seen.json", "0", "exit-message", cwd=tmp_path, stderr=subprocess.PIPE
    )
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert stderr.decode().endswith("to stderr\nthe job's own message\n")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_requester_stops_the_job(stand_in, tmp_path, signum):
    socket_path, server = stand_in
    proc = request(socket_path, "seen.json", "600", "0", cwd=tmp_path)
    assert wait_for((tmp_path / "seen.json").exists)
    job = json.loads((tmp_path / "seen.json").read_text())["pid"]
    proc.send_signal(signum)
    # Either ends the job as it ends a process, with the status a shell reports for it
    # (SIGTERM: 143; SIGINT, a KeyboardInterrupt in the job: 130).
    assert proc.wait(timeout=30) == 128 + signum
    assert wait_for(lambda: not alive(job), 10), "the job outlived its requester"
    assert server.poll() is None  # the server goes on serving


def test_a_killed_requesters_job_is_stopped(stand_in, tmp_path):
    socket_path, server = stand_in
    proc = request(socket_path, "seen.json", "600", "0", cwd=tmp_path)
    assert wait_for((tmp_path / "seen.json").exists)
    job = json.loads((tmp_path / "seen.json").read_text())["pid"]
    proc.kill()
    proc.wait(timeout=30)
    assert wait_for(lambda: not alive(job), 10), "the job outlived its killed requester"
    assert server.poll() is None


# A server that preloads torch; its job writes torch's thread count to the file it names.
THREADS_STAND_IN = textwrap.dedent(
    """
    import sys
    from reasoning_core.runtime.job_server import serve

    def job(argv):
        import torch
        with open(argv[0], "w") as f:
            f.write(str(torch.get_num_threads()))
        return 0

    sys.exit(serve(sys.argv[1], job, parent=int(sys.argv[2]), preload=("torch",)))
    """
)


def test_a_served_job_starts_with_the_torch_threads_a_process_of_its_own_would(tmp_path):
    """torch reads OMP_NUM_THREADS and MKL_NUM_THREADS once, when it loads: a job forked from a
    server that loaded torch (whose own environment asks for one thread) starts with the count
    a new process started with the job's environment has."""
    socket_path = tmp_path / "s"
    server = subprocess.Popen(
        [sys.executable, "-c", THREADS_STAND_IN, str(socket_path), str(os.getpid())], env=ENV_BASE
    )
    code = "import sys; from reasoning_core.runtime.job_server import run_via_server; "
    code += "sys.exit(run_via_server(sys.argv[1], sys.argv[2:]))"
    without = {k: v for k, v in ENV_BASE.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    cases = [{}, {"OMP_NUM_THREADS": "2"}, {"OMP_NUM_THREADS": "1"}]
    cases.append({"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "1"})
    try:
        assert wait_for(socket_path.exists, 60), "the server did not start"
        for i, extra in enumerate(cases):
            env = {**without, **extra}
            fresh = subprocess.run(
                [sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                env=env, capture_output=True, text=True, check=True,
            ).stdout.strip()  # fmt: skip
            out = tmp_path / f"threads{i}.txt"
            served = subprocess.run(
                [sys.executable, "-c", code, str(socket_path), str(out)],
                env={**env, ENV: str(socket_path)}, timeout=60,
            )  # fmt: skip
            assert served.returncode == 0
            assert out.read_text() == fresh, extra
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_server_stops_with_its_parent_and_removes_its_socket(tmp_path):
    socket_path = tmp_path / "s"
    # The shell starts the server and waits for it; killing the shell leaves it an orphan.
    script = f'{sys.executable} -c "$STAND_IN" {socket_path} $$ & wait'
    shell = subprocess.Popen(["bash", "-c", script], env={**ENV_BASE, "STAND_IN": STAND_IN})
    assert wait_for(socket_path.exists)
    shell.kill()
    shell.wait(timeout=30)
    assert wait_for(lambda: not socket_path.exists(), 15), "the server outlived its parent"


def test_without_a_server_rrl_runs_the_command_itself_and_says_so(tmp_path):
    env = {**ENV_BASE, ENV: str(tmp_path / "no-server")}
    proc = subprocess.run(
        [sys.executable, "-m", "reasoning_core.runtime.cli", "grpo", "--set", "lr=abc",
         "--out", str(tmp_path / "run")],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert f"job server {tmp_path / 'no-server'} does not answer" in proc.stderr
    assert "setting 'lr' must be a number" in proc.stderr


def test_commands_that_need_no_torch_and_torchrun_ranks_never_go_to_a_server(tmp_path):
    env = {**ENV_BASE, ENV: str(tmp_path / "no-server")}
    proc = subprocess.run(
        [sys.executable, "-m", "reasoning_core.runtime.cli", "seeds", "--help"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0 and "job server" not in proc.stderr
    ranked = {**env, "WORLD_SIZE": "2", "RANK": "0"}
    proc = subprocess.run(
        [sys.executable, "-m", "reasoning_core.runtime.cli", "grpo", "--set", "lr=abc",
         "--out", str(tmp_path / "run")],
        env=ranked, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert "job server" not in proc.stderr


def test_every_served_command_is_a_command():
    assert SERVED <= set(COMMANDS)
    assert {"eval", "sft", "ei", "grpo", "dpo", "tiny-world"} <= SERVED
    assert not SERVED & {"summary", "seeds", "plot", "ablations", "docs", "job-server"}


@pytest.mark.slow
def test_runs_through_the_server_equal_runs_in_their_own_process(world, tmp_path):
    """`rrl job-server` itself (torch and transformers preloaded): SFT and GRPO runs made
    through it have every metric of the same runs made by `rrl` in a process of its own."""
    socket_path = tmp_path / "s"
    server = subprocess.Popen(
        [sys.executable, "-m", "reasoning_core.runtime.cli", "job-server",
         "--socket", str(socket_path), "--parent", str(os.getpid())],
        env=ENV_BASE,
    )  # fmt: skip
    try:
        assert wait_for(socket_path.exists, 300), "rrl job-server did not start"
        for name, cfg in (("sft", SFT), ("grpo", {**GRPO, "n_grpo_steps": 2})):
            runs = {}
            for way, extra in (("alone", {}), ("served", {ENV: str(socket_path)})):
                out = tmp_path / way / name
                proc = subprocess.run(
                    [sys.executable, "-m", "reasoning_core.runtime.cli", name,
                     *sets({**cfg, "model_path": str(world)}), "--out", str(out)],
                    env={**ENV_BASE, **extra}, capture_output=True, text=True, timeout=600,
                )  # fmt: skip
                assert proc.returncode == 0, proc.stderr[-3000:]
                assert "job server" not in proc.stderr
                runs[way] = [
                    {k: v for k, v in line.items() if not k.startswith("time/")}
                    for line in read_metrics(out)
                ]
            assert runs["served"] == runs["alone"], name
            assert len(runs["served"]) >= 3
    finally:
        server.terminate()
        server.wait(timeout=60)
    assert not socket_path.exists()
