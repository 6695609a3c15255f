"""``served``: the benchmark tests that start many ``rrl`` runs send them to one warm
``rrl job-server`` (started once per test process, at the first test that asks for it), as a
local study's workflow does. Each run then forks from a process that has imported torch and
transformers instead of importing them anew (about 5 s of CPU per run on a 2-core machine);
the runs are the same (tests/runtime/test_job_server.py compares them with runs in processes
of their own). The benchmark scripts pass their environment on to the runs they start.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from reasoning_core.runtime.job_server import ENV


@pytest.fixture(scope="session")
def job_server(tmp_path_factory):
    """(socket path, log) of an ``rrl job-server`` that lives as long as this test process;
    its log has a line per job it forks."""
    socket_path = tmp_path_factory.mktemp("job-server") / "s"
    log = socket_path.with_name("server.log")
    with log.open("w") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "reasoning_core.runtime.cli", "job-server",
             "--socket", str(socket_path), "--parent", str(os.getpid())],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    deadline = time.monotonic() + 300
    while not socket_path.exists():
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            pytest.fail(f"rrl job-server did not start; its output:\n{log.read_text()}")
        time.sleep(0.1)
    yield socket_path, log
    server.terminate()
    server.wait(timeout=60)


@pytest.fixture
def served(job_server, monkeypatch):
    """``RRL_JOB_SERVER`` set for this test: the ``rrl`` runs it starts go to the server.
    Returns a function giving the number of jobs the server has forked during the test."""
    socket_path, log = job_server
    monkeypatch.setenv(ENV, str(socket_path))
    before = _jobs(log)
    return lambda: _jobs(log) - before


def _jobs(log) -> int:
    return sum(" job " in line for line in log.read_text().splitlines())
