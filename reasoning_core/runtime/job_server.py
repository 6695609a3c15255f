"""A warm process that runs ``rrl`` commands for a local study: each job forks from it instead
of starting Python, torch and transformers anew.

Starting a training job costs about 8 s on a 2-core CPU before its first step (``import torch``
and ``transformers.modeling_utils``, which reads its package's source files to build its lazy
import table), as long as a whole tiny-world SFT run. The server imports those once, then
forks a child per request; the child takes the requesting process's working directory,
environment, arguments and standard streams, runs :func:`reasoning_core.runtime.cli.main`, and
reports its exit status. The child runs the same code on the same inputs as a new process
would, so a run's metrics are the same (docs/benchmarks.md, "Speed of the default study").

The workflow starts one server per local ``snakemake`` invocation when the configuration sets
``job_server: true`` (workflow/rules/common.smk) and exports its socket as ``RRL_JOB_SERVER``;
``rrl`` then sends the commands of :data:`SERVED` there, and runs them itself when the
variable is unset or the server does not answer (with a note on stderr), under ``torchrun``,
and for every other command.

The requesting ``rrl`` stays the job's process for whoever started it: it forwards SIGTERM,
SIGINT and SIGHUP to the child and exits with the child's status (128 + the signal when one it
forwarded ended the child, 1 with a message when the child died without a status otherwise). A child whose requester disappears (killed with SIGKILL) is sent SIGTERM.
What snakemake's ``benchmark:`` files measure besides wall time (memory, CPU seconds) is the
requester's, not the child's: a study that reports memory sets ``job_server: false``.

The server forks only while it has one thread (torch starts its thread pools at the first
parallel operation, in the child), and exits when its parent process (snakemake) is gone.
torch reads its thread count from ``OMP_NUM_THREADS`` (or ``MKL_NUM_THREADS``) once, when it
loads: each child sets the count its requester's environment asks for.

It imports only the command registry (``rrl`` imports it before deciding where a command runs,
so it stays free of torch); the server is handed :func:`~reasoning_core.runtime.cli.main`, the
function each job runs, by ``rrl job-server``.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import json
import os
import select
import shlex
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping

from reasoning_core.runtime.commands import COMMANDS

ENV = "RRL_JOB_SERVER"
# The commands a server runs: the ones that import torch and transformers.
SERVED = frozenset(
    {"eval", "eval-suite", "sft", "instruction-sft", "ei", "grpo", "dpo", "supplement-generate",
     "safety-judge", "tiny-world", "import-gguf"}
)  # fmt: skip
# What ``rrl job-server`` imports before it serves, with the served commands' own modules.
PRELOAD = (
    "torch",
    "transformers.modeling_utils",
    "transformers.models.auto.modeling_auto",
    "transformers.models.auto.tokenization_auto",
)
_MAX_REQUEST = 1 << 22  # bytes: the environment and arguments of one request
# The variables a new process's torch reads its thread count from when it loads, the later one
# winning where both are set; the count torch takes when neither is (set by ``serve``).
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
_default_threads: int | None = None


# -- the requesting side ----------------------------------------------------------------------


def run_via_server(path: str, argv: list[str]) -> int | None:
    """Run ``rrl argv`` in the server at ``path``; its exit status, or None when no server
    answers there (the caller then runs the command itself)."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError as exc:
        conn.close()
        print(f"rrl: job server {path} does not answer ({exc}); running here", file=sys.stderr)
        return None
    request = {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ), "code": _code()}
    with conn:
        socket.send_fds(conn, [json.dumps(request).encode()], [0, 1, 2])
        reader = _Lines(conn)
        started = reader.next()
        if started is None or "pid" not in started:  # nothing started there
            why = (started or {}).get("error", "no answer")
            print(f"rrl: job server {path} refused the job ({why}); running here",
                  file=sys.stderr)  # fmt: skip
            return None
        child = int(started["pid"])
        forwarded: list[int] = []
        previous = {sig: signal.signal(sig, _forward(child, forwarded)) for sig in _FORWARDED}
        try:
            ended = reader.next()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    if ended is not None and "status" in ended:
        return int(ended["status"])
    if forwarded:  # stopped by the signal it was sent, as a shell reports a process so ended
        return 128 + forwarded[-1]
    print(f"rrl {argv[0]}: its process ({child}) ended without a status", file=sys.stderr)
    return 1


_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _forward(pid: int, forwarded: list[int]):
    def handler(signum: int, frame: object) -> None:
        forwarded.append(signum)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    return handler


class _Lines:
    """JSON messages, one per line, read from a socket (retried across signals)."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn, self.buffer = conn, b""

    def next(self) -> dict | None:
        while b"\n" not in self.buffer:
            try:
                data = self.conn.recv(4096)
            except InterruptedError:
                continue
            if not data:
                return None
            self.buffer += data
        line, _, self.buffer = self.buffer.partition(b"\n")
        return json.loads(line)


def _code() -> dict[str, str]:
    """Which code a job would run: this ``reasoning_core`` package's folder and the Python
    environment (``sys.prefix``). A forked job runs the server's modules, not the ones the
    requester's ``PYTHONPATH`` or working directory would import, so a server takes only
    requests whose code is its own: a benchmark that runs another commit's tree, or another
    virtual environment, with the variable still set then runs that code itself."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return {"package": os.path.realpath(package), "python": os.path.realpath(sys.prefix)}


def _send(conn: socket.socket, message: dict) -> None:
    conn.sendall(json.dumps(message).encode() + b"\n")


# -- the server -------------------------------------------------------------------------------


def serve(
    path: str,
    run: Callable[[list[str]], int],
    *,
    parent: int | None = None,
    preload: Iterable[str] = (),
) -> int:
    """Import the modules ``preload`` names, then serve requests at ``path`` (each job:
    ``run(argv)`` in a forked child) until SIGTERM, or until process ``parent``, which started
    the server, is gone."""
    global _default_threads
    # torch reads its thread count from the environment once, when it loads; the server's own
    # value would reach every job, so torch loads here with none and each job sets its own.
    for name in _THREAD_VARIABLES:
        os.environ.pop(name, None)
    for module in preload:
        importlib.import_module(module)
    if "torch" in sys.modules:
        _default_threads = sys.modules["torch"].get_num_threads()
    # The imported objects go to the collector's permanent generation: a job's collections
    # then skip them instead of writing to every inherited page (each write copies a page the
    # job shares with the server, which made a forked evaluation's sampling 1.1x slower).
    gc.collect()
    gc.freeze()
    if threading.active_count() != 1:
        names = [t.name for t in threading.enumerate()]
        raise RuntimeError(f"job server: threads running after the imports ({names}); cannot fork")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} serving at {path}", flush=True)
    stopping = []
    # SIGTERM, or SIGINT (Ctrl-C reaches the whole process group): stop serving, quietly.
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(True))
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    try:
        while not stopping and (parent is None or _alive(parent)):
            try:
                ready, _, _ = select.select([listener], [], [], 1.0)
            except InterruptedError:
                continue
            if ready:
                conn, _ = listener.accept()
                _accept(conn, listener, run)
    finally:
        listener.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    return 0


def _alive(parent: int) -> bool:
    """Whether ``parent`` (the process that started the server) still is its parent."""
    return os.getppid() == parent


def _accept(conn: socket.socket, listener: socket.socket, main) -> None:
    """Fork the job that ``conn`` asks for (or answer why not)."""
    fds: list[int] = []
    try:
        message, fds, _, _ = socket.recv_fds(conn, _MAX_REQUEST, 3)
        request = json.loads(message)
        if len(fds) != 3:
            raise ValueError(f"expected 3 standard streams, got {len(fds)}")
        own = _code()
        if request.get("code") != own:
            raise ValueError(f"it serves the code {own}, the request runs {request.get('code')}")
    except (OSError, ValueError) as exc:
        for fd in fds:
            os.close(fd)
        with contextlib.suppress(OSError):
            _send(conn, {"error": str(exc)})
        conn.close()
        return
    pid = os.fork()
    if pid == 0:  # the job; only it writes to ``conn`` from here on
        listener.close()
        status = _run_job(conn, fds, request, main)
        # What the interpreter does at exit, without unwinding into the server's loop
        # (whose cleanup would remove its socket): wait for the job's own threads, then run
        # its exit handlers.
        for thread in threading.enumerate():
            if thread is not threading.current_thread() and not thread.daemon:
                thread.join()
        atexit._run_exitfuncs()
        os._exit(status)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"{stamp} job {pid}: rrl {shlex.join(request['argv'])}", flush=True)
    for fd in fds:
        os.close(fd)
    conn.close()


def _run_job(conn: socket.socket, fds: list[int], request: dict, main) -> int:
    """In the forked child: become the requester's job, run it, report its status."""
    with contextlib.suppress(OSError):
        _send(conn, {"pid": os.getpid()})
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    if os.isatty(1):  # as a process started on a terminal would
        sys.stdout.reconfigure(line_buffering=True)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ.pop(ENV, None)  # the job runs here; commands it starts run in their own process
    tempfile.tempdir = None  # found again from this environment's TMPDIR at its next use
    _set_torch_threads(os.environ)
    argv = list(request["argv"])
    sys.argv = ["rrl", *argv]
    finished = threading.Event()
    threading.Thread(target=_watch_requester, args=(conn, finished), daemon=True).start()
    try:
        status = main(argv)
    except SystemExit as exc:
        if isinstance(exc.code, int) or exc.code is None:
            status = exc.code or 0
        else:  # sys.exit("message"): printed, status 1, as the interpreter does
            print(exc.code, file=sys.stderr)
            status = 1
    except BaseException as exc:  # as a process of its own: the traceback, then its status
        import traceback

        traceback.print_exc()
        # Python ends an interrupted process by SIGINT, which a shell reports as 130.
        status = 128 + signal.SIGINT if isinstance(exc, KeyboardInterrupt) else 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    finished.set()
    with contextlib.suppress(OSError):
        _send(conn, {"status": int(status or 0)})
    return int(status or 0)


def _set_torch_threads(env: Mapping[str, str]) -> None:
    """Give the job the torch thread count a new process with ``env`` would start with (what
    snakemake's ``threads`` asks for through ``OMP_NUM_THREADS``): commands that never set one
    themselves, such as ``rrl eval``, otherwise ran with the server's count: two threads per job
    beside another job on two cores, under which a study's zero-shot evaluation sampled 8x
    slower."""
    if _default_threads is None:  # torch not preloaded: it reads the variables itself
        return
    threads = _default_threads
    for name in _THREAD_VARIABLES:
        value = env.get(name, "")
        if value.isdigit() and int(value) > 0:
            threads = int(value)
    sys.modules["torch"].set_num_threads(threads)


def _watch_requester(conn: socket.socket, finished: threading.Event) -> None:
    """SIGTERM this process once the requester's end of ``conn`` closes before the job ends
    (the requester was killed without a chance to forward a signal)."""
    try:
        data = conn.recv(1)
    except OSError:
        data = b""
    if not data and not finished.is_set():
        os.kill(os.getpid(), signal.SIGTERM)


def main(argv: list[str], run: Callable[[list[str]], int]) -> int:
    """``rrl job-server``: serve at ``--socket``, each job running ``run(argv)``."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="rrl job-server",
        description="Serve the rrl commands of a local study from one warm process "
        f"({', '.join(sorted(SERVED))}); `rrl` uses it when {ENV} names its socket.",
    )
    parser.add_argument("--socket", required=True, help="the Unix socket path to listen on")
    parser.add_argument(
        "--parent",
        type=int,
        default=None,
        help="exit once this process (the server's parent) is gone",
    )
    args = parser.parse_args(argv)
    commands = sorted({COMMANDS[name].module for name in SERVED})
    return serve(args.socket, run, parent=args.parent, preload=(*PRELOAD, *commands))
