"""The Memo and MEM1 networks and their GPU benches need no Ray: they run where Ray is absent."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from memrl_testing import REPO

sys.path.insert(0, str(REPO / "scripts"))
import gpu_image_env  # noqa: E402

MEMO_TINY = ["--t", "512", "--batch", "1", "--modes", "memo,fct", "--n-layers", "1",
             "--l-seg", "16", "--l-sum", "4", "--fct-steps", "2"]  # fmt: skip
MEM1_TINY = ["--preset", "tiny", "--device", "cpu", "--gen-batch", "2", "--prompt-tokens", "16",
             "--new-tokens", "4", "--row-tokens", "256", "--rows", "2", "--micro-rows", "1",
             "--steps", "1"]  # fmt: skip


def _run(python: Path | str, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), "-c", code],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_networks_and_benches_import_no_ray(tmp_path: Path) -> None:
    code = f"""
import sys
import memrl.methods.memo.network, memrl.methods.mem1.network, memrl.methods.mem1.generation.hf
import memrl.bench.memo_memory, memrl.bench.mem1_speed
assert "ray" not in sys.modules, "importing a network or a bench imported ray"
from memrl.cli import main
assert main(["bench", "memo-memory", *{MEMO_TINY!r}, "--output", {str(tmp_path / "a")!r}]) == 0
assert main(["bench", "mem1-speed", *{MEM1_TINY!r}, "--output", {str(tmp_path / "b")!r}]) == 0
assert "ray" not in sys.modules, sorted(m for m in sys.modules if m.startswith("ray"))
print("no ray")
"""
    done = _run(sys.executable, code)
    assert done.returncode == 0 and "no ray" in done.stdout, done.stderr[-3000:]


def test_benches_run_where_ray_is_not_installed(tmp_path: Path) -> None:
    env = gpu_image_env.build(tmp_path / "env", exclude={"ray"})
    assert _run(env.python, "import ray").returncode != 0  # Ray is really absent there
    for argv in (["memo-memory", *MEMO_TINY], ["mem1-speed", *MEM1_TINY]):
        out = tmp_path / argv[0]
        done = subprocess.run(
            [str(env.python), "-m", "memrl", "bench", *argv, "--output", str(out)],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert list(out.glob("*.parquet")), f"{argv[0]} wrote no table"


def test_mem1_speed_on_cuda_without_one_is_a_one_line_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "memrl", "bench", "mem1-speed", "--device", "cuda",
         "--output", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},  # no GPU, even on a GPU machine
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: --device cuda, but torch sees no CUDA device; use --device cpu or auto"
    ]
