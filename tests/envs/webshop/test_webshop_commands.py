"""`memrl data webshop`, `memrl serve webshop` and `memrl bench webshop`."""

from __future__ import annotations

import argparse
import subprocess
import sys
import urllib.request

import pandas as pd

from memrl.bench import webshop as bench_cmd
from memrl.data import webshop as data_cmd
from memrl.envs.webshop import WebShopEnv, load_catalogue


def _args(module, argv):
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    return parser.parse_args(argv)


def test_data_command_writes_a_loadable_catalogue(tmp_path, capsys):
    out = tmp_path / "ws"
    assert (
        data_cmd.run(_args(data_cmd, ["--products", "150", "--seed", "3", "--output", str(out)]))
        == 0
    )
    assert "wrote 150 products" in capsys.readouterr().out
    assert len(load_catalogue(out)) == 150
    env = WebShopEnv(data_dir=str(out), num_products=None, seed=3, split="all")
    obs, info = env.reset(options={"task_index": 0})
    assert info["task"]["instruction"] in obs


def test_serve_command_serves_on_localhost(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "memrl", "serve", "webshop", "--port", "0", "--products", "200"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert "serving http://127.0.0.1:" in line, line + proc.stderr.read()
        url = line.split("serving ", 1)[1].split()[0]
        with urllib.request.urlopen(url + "?goal=0", timeout=30) as resp:
            page = resp.read().decode()
        assert "id='search_input'" in page and "Instruction:" in page
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_bench_command_writes_report(tmp_path):
    out = tmp_path / "bench"
    args = _args(
        bench_cmd,
        [
            "--sizes",
            "100",
            "--seconds",
            "0.5",
            "--queries",
            "20",
            "--output",
            str(out),
            "--workdir",
            str(tmp_path),
        ],
    )
    assert bench_cmd.run(args) == 0
    frame = pd.read_parquet(out / "webshop.parquet")
    assert frame["products"].tolist() == [100]
    assert (frame["steps_per_s"] > 0).all() and (frame["search_p50_ms"] > 0).all()
    assert 0 < frame["shopper_reward"].iloc[0] <= 1.5
    assert (out / "webshop.md").exists() and (out / "webshop.png").exists()
