"""The GPU-day kit: its lists and size budget, Ray's repacked wheel, the check runner, the command.

The kit is built without a GPU and run where no test can go, so these tests try it the closest
way they can: the lists against each other, a repacked wheel through a real ``pip install``, the
runner on real processes, and the whole GPU-day script with ``--device cpu --quick`` in an
environment that holds only the GPU image's distributions and the kit's (gpu_image_env.py).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from memrl_testing import REPO

sys.path.insert(0, str(REPO / "scripts"))
import gpu_check  # noqa: E402
import gpu_image_env  # noqa: E402
import gpu_kit  # noqa: E402


def _wheel(folder: Path, files: dict[str, tuple[bytes, int]]) -> Path:
    """A real wheel ``demo-1.0`` holding ``files`` (path -> (content, unix mode))."""
    path = folder / "demo-1.0-py3-none-any.whl"
    info = "demo-1.0.dist-info"
    files = {
        **files,
        f"{info}/METADATA": (b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n", 0o644),
        f"{info}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
            0o644,
        ),
    }
    record = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, (data, mode) in files.items():
            entry = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            entry.external_attr = (0o100000 | mode) << 16
            zf.writestr(entry, data, compress_type=zipfile.ZIP_DEFLATED)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{name},sha256={digest.decode()},{len(data)}")
        record.append(f"{info}/RECORD,,")
        zf.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return path


# --- the lists --------------------------------------------------------------------------------


def test_image_list_is_the_documented_image() -> None:
    image = gpu_kit.image_packages()
    assert image["torch"] == "2.11.0" and image["transformers"] == "5.17.0"
    assert {"pandas", "pyarrow", "peft", "accelerate", "msgpack", "grpcio", "protobuf"} <= set(
        image
    )
    assert not {"ray", "gymnasium", "bm25s", "vllm"} & set(image)


def test_kit_pins_each_missing_distribution_once_with_its_recorded_file() -> None:
    wheels = gpu_kit.kit_wheels()
    names = [w.name for w in wheels]
    assert {"ray", "gymnasium", "jsonschema", "pydantic", "dm-tree"} <= set(names)
    assert not set(names) & set(gpu_kit.image_packages()), "a second copy would shadow the image's"
    for wheel in wheels:
        assert re.fullmatch(r"[0-9a-f]{64}", wheel.sha256), wheel
        assert wheel.kit_bytes > 0, wheel
    ray = next(w for w in wheels if w.name == "ray")
    assert ray.version == "2.60.0" and ray.strip == ("ray/jars/",)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ray 2.60.0 10 -\n", "bad line"),
        ("ray==2.60.0 10 - jars\n", "bad 4th field"),
        ("ray==2.60.0 10 -\nRay==2.59.0 10 -\n", "listed more than once"),
    ],
)
def test_a_bad_manifest_line_is_an_error_naming_it(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "wheels.txt"
    path.write_text("# header\n" + text)
    with pytest.raises(ValueError, match=message):
        gpu_kit.kit_wheels(path)


def test_kit_and_working_tree_fit_the_carry_limit() -> None:
    budget = gpu_kit.recorded_budget()
    budget.check()
    assert 0 < budget.total <= gpu_kit.CARRY_LIMIT, budget.describe()
    # The same check refuses a call one byte over the limit.
    over = gpu_kit.Budget(tree_bytes=budget.tree_bytes, kit_bytes=gpu_kit.CARRY_LIMIT)
    with pytest.raises(ValueError, match="over the carry limit"):
        over.check()


def test_tree_files_are_tracked_and_untracked_not_ignored(tmp_path: Path) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / ".gitignore").write_text("/.gpu_kit/\n*.log\n")
    (tmp_path / "tracked.py").write_text("x = 1\n")
    git("add", ".gitignore", "tracked.py")
    (tmp_path / "new.py").write_text("y = 2\n")
    (tmp_path / "run.log").write_text("ignored\n")
    (tmp_path / ".gpu_kit").mkdir()
    (tmp_path / ".gpu_kit" / "big.whl").write_bytes(b"0" * 1000)
    names = {p.name for p in gpu_kit.tree_files(tmp_path)}
    assert names == {".gitignore", "tracked.py", "new.py"}
    assert gpu_kit.tree_bytes(tmp_path) == sum(
        (tmp_path / n).stat().st_size for n in (".gitignore", "tracked.py", "new.py")
    )


# --- Ray's repacked wheel ---------------------------------------------------------------------


def test_repacked_wheel_installs_without_the_stripped_folder(tmp_path: Path) -> None:
    src = _wheel(
        tmp_path,
        {
            "demo/__init__.py": (b"VALUE = 3\n", 0o644),
            "demo/jars/big.jar": (b"\0" * 5000, 0o644),
            "demo/bin/tool": (b"#!/bin/sh\necho tool\n", 0o755),
        },
    )
    out = tmp_path / "kit"
    out.mkdir()
    dest = out / src.name
    assert gpu_kit.repack_without(src, dest, ("demo/jars/",)) == 1
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target",
         str(target), str(dest)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    assert (target / "demo" / "__init__.py").read_text() == "VALUE = 3\n"
    assert not (target / "demo" / "jars").exists()
    assert os.access(target / "demo" / "bin" / "tool", os.X_OK), "binaries must stay executable"
    record = (target / "demo-1.0.dist-info" / "RECORD").read_text()
    assert "demo/jars" not in record and "demo/bin/tool" in record


def test_repack_refuses_a_prefix_that_matches_nothing(tmp_path: Path) -> None:
    src = _wheel(tmp_path, {"demo/__init__.py": (b"", 0o644)})
    with pytest.raises(ValueError, match="nothing under"):
        gpu_kit.repack_without(src, tmp_path / "out.whl", ("demo/jars/",))
    assert not (tmp_path / "out.whl").exists()


# --- only the image and the kit ---------------------------------------------------------------


@pytest.fixture(scope="module")
def image_env(tmp_path_factory: pytest.TempPathFactory) -> gpu_image_env.ImageEnv:
    """An environment with the GPU image's distributions and the kit's, nothing else."""
    env = gpu_image_env.build(tmp_path_factory.mktemp("image") / "env")
    assert not env.kit_missing, f"the kit's {env.kit_missing} are not installed here"
    return env


def _python(env: gpu_image_env.ImageEnv, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(env.python), "-c", code],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_every_module_the_checks_import_is_in_the_image_or_the_kit(
    image_env: gpu_image_env.ImageEnv,
) -> None:
    modules = sorted({m for mods in gpu_check.MODULES.values() for m in mods})
    code = "import importlib\n" + "".join(f"importlib.import_module({m!r})\n" for m in modules)
    done = _python(image_env, code + "print('imported')")
    assert done.returncode == 0 and "imported" in done.stdout, done.stderr[-3000:]


def test_without_a_kit_wheel_ray_does_not_import(tmp_path: Path) -> None:
    # The control of the test above: the environment does hide what the kit leaves out.
    env = gpu_image_env.build(tmp_path / "env", exclude={"jsonschema"})
    done = _python(env, "import ray")
    assert done.returncode != 0
    assert "No module named 'jsonschema'" in done.stderr


# --- the runner -------------------------------------------------------------------------------


def test_full_plan_runs_the_paper_sizes_on_cuda(tmp_path: Path) -> None:
    import argparse

    from memrl.bench import mem1_speed, memo_memory

    checks = {c.name: c for c in gpu_check.plan(tmp_path, "cuda", quick=False)}
    assert list(checks) == [
        "environment", "memo-memory", "mem1-speed", "mem1-learner", "memo-ppo", "vllm",
    ]  # fmt: skip
    assert not checks["mem1-learner"].skip and "--skip-vllm" in checks["mem1-learner"].argv

    def parsed(module, argv: list[str]) -> argparse.Namespace:
        parser = argparse.ArgumentParser()
        module.add_arguments(parser)
        return parser.parse_args(argv[argv.index(module.NAME.replace("_", "-")) + 1 :])

    memo = parsed(memo_memory, checks["memo-memory"].argv)
    assert memo.device == "cuda" and memo.batch == "1,32" and memo.t.endswith(",32768")
    assert {"memo", "fct"} <= set(memo.modes.split(","))
    assert (memo.d_model, memo.n_layers, memo.l_seg, memo.l_sum) == (256, 4, 256, 32)
    # FCT at t = 32k, batch 32 (8.6 GB of K/V) is measured, not skipped.
    assert memo.max_cache_gb >= 32768 * 4 * 2 * 256 * 4 * 32 / 1e9
    mem1 = parsed(mem1_speed, checks["mem1-speed"].argv)
    assert mem1.device == "cuda" and mem1.preset == ["qwen0.5b", "smollm2-135m"]
    assert set(mem1.train) == {"full", "lora", "frozen", "lora-frozen"}
    ppo = checks["memo-ppo"].argv
    assert ppo[ppo.index("--devices") + 1] == "cuda,cpu"
    if importlib.util.find_spec("vllm") is None:
        assert "vLLM is not installed" in checks["vllm"].skip
    # The run's deadline (checks past it are reported "not run") plus installing the kit and
    # packing the results keeps the whole GPU day under 8 minutes.
    assert gpu_check.BUDGET_S + 60 < 8 * 60


def _check(name: str, code: str, limit: float = 60) -> gpu_check.Check:
    return gpu_check.Check(name, [sys.executable, "-c", code], limit)


def test_runner_reports_each_outcome_and_goes_on(tmp_path: Path) -> None:
    writes_table = (
        f"import pathlib; p = pathlib.Path({str(tmp_path / 'ok')!r}); p.mkdir(); "
        "(p / 't.md').write_text('| a |\\n|---|\\n| 1 |')"
    )
    checks = [
        gpu_check.Check("ok", [sys.executable, "-c", writes_table], 60, "ok/t.md"),
        _check("failed", "print('step 1'); raise SystemExit('broken at step 2')"),
        _check("slow", "import time; time.sleep(60)", limit=1),
        gpu_check.Check("absent", ["false"], 60, skip="not installed here"),
    ]
    deadline = time.monotonic() + 600
    outcomes = [gpu_check.run_check(c, tmp_path, deadline) for c in checks]
    assert [o.status for o in outcomes] == ["ok", "failed", "timeout", "skipped"]
    assert "broken at step 2" in outcomes[1].note and "exit code 1" in outcomes[1].note
    assert "stopped after" in outcomes[2].note
    assert outcomes[3].note == "not installed here"
    late = gpu_check.run_check(_check("late", "pass"), tmp_path, time.monotonic())
    assert late.status == "not run"

    text = gpu_check.summarize(outcomes + [late], checks + [_check("late", "")], tmp_path, "h")
    assert "| ok | ok |" in text and "| failed | failed |" in text and "| late | not run |" in text
    assert "## ok\n\n| a |" in text  # the check's own table follows the status table
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert [c["status"] for c in saved["checks"]] == [
        "ok",
        "failed",
        "timeout",
        "skipped",
        "not run",
    ]
    assert (tmp_path / "summary.md").read_text() == text
    assert "broken at step 2" in (tmp_path / "failed.log").read_text()


def test_a_check_that_runs_out_of_time_takes_its_children_along(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    code = (
        "import subprocess, sys, time, pathlib\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        f"pathlib.Path({str(pid_file)!r}).write_text(str(child.pid))\n"
        "time.sleep(120)\n"
    )
    outcome = gpu_check.run_check(_check("parent", code, limit=3), tmp_path, time.monotonic() + 60)
    assert outcome.status == "timeout"
    pid = int(pid_file.read_text())
    status = Path(f"/proc/{pid}/status")
    for _ in range(100):  # the signal is sent; the kernel may take a moment to end the process
        if not status.exists() or "\nState:\tZ" in status.read_text():
            break
        time.sleep(0.1)
    assert not status.exists() or "\nState:\tZ" in status.read_text(), "the child outlived it"


# --- the command ------------------------------------------------------------------------------


def test_doc_gives_the_gpu_day_command_within_its_limits() -> None:
    doc = (REPO / "docs" / "gpu.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", doc, flags=re.S)
    command = next(b.strip() for b in blocks if "scripts/gpu_day.sh" in b)
    assert command == 'bash scripts/gpu_day.sh "$OUT"'
    assert len(command) < 2000
    assert "`.gpu_kit`" in doc and "scripts/gpu_kit.sh" in doc


def test_gpu_day_without_a_kit_says_how_to_build_it(tmp_path: Path) -> None:
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_day.sh"), str(tmp_path / "out")],
        env={**os.environ, "GPU_KIT_DIR": str(tmp_path / "empty")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "scripts/gpu_kit.sh" in done.stderr


@pytest.mark.slow
def test_gpu_day_quick_cpu_run_end_to_end(
    image_env: gpu_image_env.ImageEnv, tmp_path: Path
) -> None:
    # The GPU-day script itself, on the CPU with small sizes, where only the image's and the
    # kit's distributions are installed; its kit here is one small wheel (the real one is cp312).
    kit = tmp_path / "kit"
    kit.mkdir()
    _wheel(kit, {"demo/__init__.py": (b"", 0o644)})
    out = tmp_path / "out"
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_day.sh"), str(out), "--device", "cpu", "--quick"],
        env={**os.environ, "PYTHON": str(image_env.python), "GPU_KIT_DIR": str(kit),
             "PYTHONPATH": "", "OMP_NUM_THREADS": "1"},
        capture_output=True, text=True, timeout=1500,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "kit installed" in done.stdout
    summary = (out / "summary.md").read_text()
    for name in ("environment", "memo-memory", "mem1-speed", "memo-ppo"):
        assert f"| {name} | ok |" in summary
    assert "| vllm | skipped |" in summary and "vLLM is not installed" in summary
    assert "| mem1-learner | skipped |" in summary and "needs --device cuda" in summary
    with tarfile.open(out / "gpu_check.tgz") as tar:
        names = set(tar.getnames())
        ppo = json.load(tar.extractfile("results/summary.json"))
        learner = pq.read_table(
            tar.extractfile("results/memo_ppo/memo_ppo_learner.parquet")
        ).to_pylist()
    for path in (
        "results/memo_memory/memo-memory.parquet",
        "results/mem1_speed/mem1_speed.parquet",
        "results/memo_ppo/memo_ppo_learner.parquet",
        "results/environment.json",
        "results/memo-ppo.log",
    ):
        assert path in names
    assert [c["status"] for c in ppo["checks"]] == ["ok", "ok", "ok", "skipped", "ok", "skipped"]
    assert ppo["environment"]["imports_failed"] == {}
    # Both learner precisions, each against the CPU's float32 learner.
    assert [(r["device"], r["precision"]) for r in learner] == [
        ("cpu", "float32"), ("cpu", "bfloat16"),
    ]  # fmt: skip
    assert learner[0]["speedup_vs_cpu"] == 1.0 and learner[1]["learner_steps_per_s"] > 0
