"""Every GPU check of the project in one run, each under its own time limit.

Checks, in this order:

- ``environment``: interpreter, torch and CUDA, the GPU, versions of the packages the checks use;
- ``memo-memory``: ``memrl bench memo-memory``, the paper's Memo model (4 layers, d_model 256,
  l_seg 256, l_sum 32) against RMT and the full-context transformer (FCT) at batch 1 and 32 and
  t up to 32k: step time and K/V bytes;
- ``mem1-speed``: ``memrl bench mem1-speed``, bf16 generation of the hf backend and the MEM1
  learner step (full fine-tuning, LoRA, frozen lower layers; micro-batches of 1 and 4 rows of 4096
  tokens) for Qwen2.5-0.5B's and SmolLM2-135M's shapes with random weights (no hub);
- ``mem1-learner``: ``scripts/gpu_mem1_check.py --skip-vllm``, peak CUDA memory of one MEM1
  learner update at 8k-token rows (Qwen2.5-0.5B's width and vocabulary, 2 layers), the default
  path (chunked log-probs, micro-batches) against full-vocabulary logits; needs CUDA (skipped
  with ``--device cpu``);
- ``memo-ppo``: ``scripts/gpu_learner_check.py``, one Memo PPO iteration with the learner on the
  GPU (``num_gpus_per_learner=1``) against the same on the CPU, each with a float32 and a
  bfloat16 (``model.learner_precision``) learner;
- ``vllm``: generation through memrl's vLLM backend; skipped, with a line saying so, where vLLM is
  not installed (the GPU image has none).

Each check runs as its own process, its output going to ``<output>/<check>.log``, under its own
limit and a deadline for the whole run; a check that fails or runs out of time is reported and the
next one runs. Writes ``<output>/summary.md`` (a status table, then each check's own table) and
``summary.json``, and prints the summary last. Exit code: 0 when no check failed, else 1.

    python scripts/gpu_check.py --output DIR                        # on the GPU machine
    python scripts/gpu_check.py --output DIR --device cpu --quick   # the same code on a CPU, small
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ["ray", "gymnasium", "transformers", "peft", "accelerate", "numpy", "pandas", "pyarrow"]
"""Distributions whose versions the environment check records."""
MODULES = {
    "memo-memory": [
        "memrl.cli",
        "memrl.bench.memo_memory",
        "memrl.methods.memo.network",
        "memrl.experiment.tables",
        "pyarrow.parquet",
        "matplotlib.pyplot",
    ],
    "mem1-speed": [
        "memrl.bench.mem1_speed",
        "memrl.methods.mem1.batch",
        "memrl.methods.mem1.context",
        "memrl.methods.mem1.generation.hf",
        "memrl.methods.mem1.losses",
        "memrl.methods.mem1.network",
        "transformers.models.qwen2.modeling_qwen2",
        "transformers.models.llama.modeling_llama",
        "peft",
    ],
    "mem1-learner": [
        "ray.rllib.core",
        "memrl.bench.mem1_memory",
        "memrl.envs.text",
        "memrl.methods.mem1.learner",
        "memrl.experiment.tables",
    ],
    "memo-ppo": [
        "ray",
        "ray.rllib.algorithms.ppo",
        "memrl.experiment.build",
        "memrl.experiment.train",
        "memrl.experiment.ray_session",
        "memrl.methods.memo.settings",
        "memrl.methods.memo.learner",
        "memrl.methods.memo.batch",
        "memrl.methods.memo.connectors",
    ],
}
"""What each check imports (at import time and inside its ``run``): the environment check
imports them all first, and tests import them where only the image and the kit are installed."""
# Arguments of each check on the GPU (the sizes its figures are for) and with --quick (a trial on
# a CPU, small). memo-memory keeps its own defaults on the GPU: the paper's Memo model at batch 1
# and 32, t up to 32k; mem1-speed its CUDA defaults (bf16, 4096-token rows).
ARGS = {
    # FCT's K/V at t = 32k and batch 32 is 8.6 GB: let it onto the GPU.
    "memo-memory": "--max-cache-gb 40",
    "mem1-speed": "--preset qwen0.5b smollm2-135m",
    "mem1-learner": "--skip-vllm",
    "memo-ppo": "",
    "vllm": "",
}
QUICK_ARGS = {
    "memo-memory": "--t 512,1024 --batch 1,2 --d-model 64 --n-layers 1 --l-seg 32 --l-sum 4 "
    "--fct-steps 4",
    # bfloat16 as on the GPU, so the trial takes the GPU's path through generation and the learner.
    "mem1-speed": "--preset tiny --dtype bfloat16 --gen-batch 2 --prompt-tokens 32 --new-tokens 8 "
    "--row-tokens 512 --rows 2 --micro-rows 1 2 --steps 1",
    "mem1-learner": "--skip-vllm",
    "memo-ppo": "--models memo-small --train-batch 400 --minibatch 200",
    "vllm": "--batch 2 --prompt-tokens 32 --new-tokens 8",
}
LIMITS = {
    "environment": 60,
    "memo-memory": 120,
    "mem1-speed": 180,
    "mem1-learner": 90,
    "memo-ppo": 240,
    "vllm": 120,
}
"""Seconds each check may take on the GPU machine."""
QUICK_LIMITS = {
    "environment": 120,
    "memo-memory": 240,
    "mem1-speed": 240,
    "mem1-learner": 60,
    "memo-ppo": 300,
    "vllm": 240,
}
"""The same with --quick on a shared CPU (the sizes are small; the machine may be loaded)."""
BUDGET_S = 400.0
"""Deadline of all checks together on the GPU machine (1200 s with --quick): a check the deadline
stops is reported, and those after it are "not run"."""
# Seconds kept for writing the summary when the deadline stops a check.
RESERVE_S = 5.0


@dataclass
class Check:
    """One check: a command, its time limit, and the table it writes."""

    name: str
    """Short name (also the log file's)."""
    argv: list[str]
    """The command (run with this interpreter, from the repository root)."""
    limit_s: float
    """Seconds the check may take."""
    table: str = ""
    """The markdown table it writes, relative to the output folder ("" for none)."""
    skip: str = ""
    """Why the check is not run here ("" to run it)."""


@dataclass
class Outcome:
    """How one check went."""

    check: str
    """The check's name."""
    status: str
    """ok, failed, timeout, skipped or not run (the deadline came first)."""
    seconds: float
    """Wall time it took."""
    limit_s: float
    """Its limit (lowered to what was left before the deadline)."""
    note: str = ""
    """Why it was skipped, or the last line it printed when it failed."""
    command: list[str] = field(default_factory=list)
    """The command that ran."""


def plan(out: Path, device: str, quick: bool) -> list[Check]:
    """The checks to run, with their arguments for this device and size."""
    extra = {name: args.split() for name, args in (QUICK_ARGS if quick else ARGS).items()}
    limits = QUICK_LIMITS if quick else LIMITS
    py = sys.executable
    scripts = REPO / "scripts"
    bench = [py, "-m", "memrl", "bench"]
    probe = [py, str(scripts / "gpu_check.py"), "--probe", str(out / "environment.json")]
    devices = "cuda,cpu" if device == "cuda" else "cpu"
    commands = {
        "environment": probe + ["--device", device],
        "memo-memory": bench + ["memo-memory", "--device", device],
        "mem1-speed": bench + ["mem1-speed", "--device", device],
        "mem1-learner": [py, str(scripts / "gpu_mem1_check.py")],
        "memo-ppo": [py, str(scripts / "gpu_learner_check.py"), "--devices", devices],
        "vllm": [py, str(scripts / "gpu_vllm_check.py"), "--device", device],
    }
    folders = {"memo-memory": "memo_memory", "mem1-speed": "mem1_speed", "memo-ppo": "memo_ppo",
               "mem1-learner": "mem1_learner", "vllm": "vllm"}  # fmt: skip
    tables = {"memo-memory": "memo-memory.md", "mem1-speed": "mem1_speed.md",
              "memo-ppo": "memo_ppo_learner.md", "mem1-learner": "gpu_mem1_check.md",
              "vllm": "vllm_generation.md"}  # fmt: skip
    no_vllm = (
        ""
        if importlib.util.find_spec("vllm") is not None
        else "vLLM is not installed on this machine (the GPU image has none and it is too large "
        "for the kit); mem1-speed measures the hf backend's generation instead"
    )
    no_cuda = "" if device == "cuda" else "peak CUDA memory: needs --device cuda"
    checks = []
    for name, argv in commands.items():
        table = ""
        if name in folders:
            argv = argv + ["--output", str(out / folders[name])] + extra[name]
            table = f"{folders[name]}/{tables[name]}"
        skip = {"vllm": no_vllm, "mem1-learner": no_cuda}.get(name, "")
        checks.append(Check(name, argv, limits[name], table, skip=skip))
    return checks


def run_check(check: Check, out: Path, deadline: float) -> Outcome:
    """Runs one check in its own process group, under min(its limit, the time left)."""
    if check.skip:
        return Outcome(check.name, "skipped", 0.0, check.limit_s, check.skip, check.argv)
    limit = min(check.limit_s, deadline - time.monotonic() - RESERVE_S)
    if limit < 1:
        return Outcome(check.name, "not run", 0.0, 0.0, "the run's deadline came first")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    log_path = out / f"{check.name}.log"
    start = time.monotonic()
    with log_path.open("w") as log:
        log.write("$ " + " ".join(check.argv) + "\n")
        log.flush()
        # Its own session: on timeout the whole group goes (Ray's processes with the driver).
        proc = subprocess.Popen(
            check.argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        try:
            code = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            seconds = time.monotonic() - start
            note = (
                f"stopped after {limit:.0f} s; the end of {log_path.name}: {_last_line(log_path)}"
            )
            return Outcome(check.name, "timeout", seconds, limit, note, check.argv)
    seconds = time.monotonic() - start
    if code != 0:
        note = f"exit code {code}: {_last_line(log_path)}"
        return Outcome(check.name, "failed", seconds, limit, note, check.argv)
    if check.table and not (out / check.table).is_file():
        note = f"exit code 0 but no {check.table}"
        return Outcome(check.name, "failed", seconds, limit, note, check.argv)
    return Outcome(check.name, "ok", seconds, limit, "", check.argv)


def _kill_group(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _last_line(path: Path) -> str:
    lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "(no output)"


def summarize(outcomes: list[Outcome], checks: list[Check], out: Path, header: str) -> str:
    """Writes summary.md and summary.json; returns the markdown."""
    from memrl.experiment.tables import format_table

    rows = [
        {
            "check": o.check,
            "status": o.status,
            "seconds": round(o.seconds, 1),
            "limit_s": round(o.limit_s),
            "note": o.note,
        }  # fmt: skip
        for o in outcomes
    ]
    parts = [f"# GPU checks\n\n{header}\n", format_table(rows)]
    tables = {c.name: c.table for c in checks}
    for o in outcomes:
        path = out / tables[o.check] if tables[o.check] else None
        if path is not None and path.is_file():
            partial = "" if o.status == "ok" else f" ({o.status}: what it wrote before)"
            parts.append(f"## {o.check}{partial}\n\n" + path.read_text().strip())
    env_path = out / "environment.json"
    environment = json.loads(env_path.read_text()) if env_path.is_file() else {}
    text = "\n\n".join(parts) + "\n"
    (out / "summary.md").write_text(text)
    summary = {"header": header, "environment": environment,
               "checks": [asdict(o) for o in outcomes]}  # fmt: skip
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return text


def probe(path: Path, device: str) -> int:
    """Writes what the machine has to ``path`` (JSON); exit 1 when a module of ``MODULES`` does
    not import or ``device`` is not usable."""
    import importlib.metadata as md

    import torch

    info: dict = {
        "python": platform.python_version(),
        "executable": sys.executable,
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "cpus": os.cpu_count(),
    }
    for name in PACKAGES:
        try:
            info[name] = md.version(name)
        except md.PackageNotFoundError:
            info[name] = None
    failed = {}
    for module in sorted({m for mods in MODULES.values() for m in mods}):
        try:
            importlib.import_module(module)
        except Exception as err:  # noqa: BLE001  (every missing module is reported, not the first)
            failed[module] = f"{type(err).__name__}: {err}"
    info["imports_failed"] = failed
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info["gpu"] = props.name
        info["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
        info["gpu_capability"] = f"{props.major}.{props.minor}"
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        info["nvidia_smi"] = smi.stdout.strip() or smi.stderr.strip()
    except (FileNotFoundError, subprocess.TimeoutExpired) as err:
        info["nvidia_smi"] = f"unavailable: {err}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(info, indent=1))
    print(json.dumps(info, indent=1))
    if failed:
        print(f"error: the checks' modules {sorted(failed)} do not import", file=sys.stderr)
        return 1
    if device == "cuda" and not info["cuda_available"]:
        print("error: --device cuda but torch sees no CUDA device", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, help="folder for the logs, tables and summary")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument(
        "--quick", action="store_true", help="small sizes: a CPU trial run of the same checks"
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        help=f"deadline for all checks together (default: {BUDGET_S:.0f} s, 1200 s with --quick)",
    )
    parser.add_argument("--only", help="comma-separated check names to run (default: all)")
    parser.add_argument("--probe", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))  # the summary's table format comes from memrl
    if args.probe:
        return probe(args.probe, args.device)
    if args.output is None:
        parser.error("--output is required")
    out = args.output.resolve()
    out.mkdir(parents=True, exist_ok=True)
    budget = args.budget_s or (1200.0 if args.quick else BUDGET_S)
    deadline = time.monotonic() + budget
    checks = plan(out, args.device, args.quick)
    if args.only:
        wanted = {n.strip() for n in args.only.split(",") if n.strip()}
        unknown = sorted(wanted - {c.name for c in checks})
        if unknown:
            parser.error(f"--only: unknown checks {unknown}; have {[c.name for c in checks]}")
        checks = [c for c in checks if c.name in wanted]
    outcomes = []
    started = time.monotonic()
    for check in checks:
        print(f"--- {check.name} (limit {check.limit_s:.0f} s)", flush=True)
        outcome = run_check(check, out, deadline)
        outcomes.append(outcome)
        print(
            f"    {outcome.status} in {outcome.seconds:.1f} s {outcome.note}".rstrip(), flush=True
        )
    header = (
        f"device {args.device}{' (quick sizes)' if args.quick else ''}; "
        f"{time.monotonic() - started:.0f} s in all; python {platform.python_version()}; "
        f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}"
    )
    print(summarize(outcomes, checks, out, header))
    return 1 if any(o.status in ("failed", "timeout", "not run") for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
