"""`memrl train` with the MEM1 algorithm on a real embedded Ray: both algorithms, both modes."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from memrl_testing import memrl_cli, write_config

pytestmark = pytest.mark.slow


def _config(tmp_path, name, **algorithm):
    data = {
        "name": name,
        "env": {
            "id": "memrl/DocQA-v0",
            "config": {"synthetic_passages": 60, "objectives": 2, "num_tasks": 40, "max_turns": 3},
        },
        "algorithm": {
            "name": "mem1",
            "max_tokens_per_turn": 12,
            "lr": 1e-3,
            "max_tokens_per_row": 1024,
            "train_tasks": 40,
            **algorithm,
        },
        "model": {
            "type": "llm",
            "path": "tiny",
            "tiny_corpus_episodes": 20,
            "tiny": {
                "vocab_size": 512,
                "hidden_size": 32,
                "num_layers": 2,
                "intermediate_size": 64,
            },
        },
        "resources": {"num_env_runners": 0, "num_envs_per_env_runner": 4},
        "run": {"stop_iters": 1, "checkpoint_every": 1, "output_dir": str(tmp_path / "runs")},
    }
    return write_config(tmp_path / f"{name}.yaml", data)


def test_ppo_per_turn_with_a_remote_runner_and_warm_start(tmp_path):
    cfg = _config(
        tmp_path,
        "ppo",
        algorithm="ppo",
        sequence_mode="per_turn",
        eval_every=1,
        eval_tasks=2,
        warm_start={"episodes": 4, "epochs": 1, "env_config": {"test_fraction": 0.5}},
        # a second held-out set: train-split tasks that training never draws (train_tasks 38)
        train_tasks=38,
        eval_extra={"unseen": {"env_config": {"split": "train"}, "task_offset": 38}},
    )
    run = tmp_path / "ppo_run"
    out = memrl_cli(
        "train",
        str(cfg),
        "--output",
        str(run),
        "--stop-iters",
        "2",
        "--set",
        "resources.num_env_runners=1",
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    # The warm start runs before the first iteration line: it says what it does and when done.
    assert "warm start: playing 4 scripted episodes" in out.stdout
    assert "warm start: done" in out.stdout
    # ... and keeps the warmed-up model as a folder that starts other runs
    import re

    from memrl.methods.mem1.rlmodule import load_policy

    saved = Path(re.search(r"warm start: model saved to (\S+)", out.stdout).group(1))
    assert saved.name == "warm_start_model" and run / "rllib" in saved.parents

    lm, tokenizer = load_policy(saved)
    assert lm.config.hidden_size == 32 and tokenizer.encode("<think>")
    frame = pd.read_parquet(run / "metrics.parquet")
    assert len(frame) == 2
    cols = " ".join(frame.columns)
    for key in (
        "rollout_peak_tokens",
        "rollout_dependency",
        "policy_loss",
        "vf_loss",
        "logp_gap_mean",
        "eval_em",
        "eval_unseen_em",
        "eval_unseen_f1",
    ):
        assert key in cols, f"{key} missing from {sorted(frame.columns)}"
    gap = [c for c in frame.columns if c.endswith("logp_gap_max")][0]
    # per_turn recomputes the runner's behaviour log-probs (weights synced after each update).
    assert frame[gap].max() < 1e-4
    steps = frame["env_steps_sampled"].tolist()
    assert steps[1] > steps[0] > 0
    # The tiny model lives in the run directory given by --output, nowhere else.
    assert list((run / "tiny_model").glob("*/config.json"))
    assert not (tmp_path / "runs").exists()

    # `memrl eval` of the run: EM, F1, peak tokens and turns on held-out tasks, with transcripts.
    report = tmp_path / "eval.json"
    out = memrl_cli("eval", str(run), "--episodes", "3", "--output", str(report), timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads(report.read_text())
    assert result["episodes"] == 3
    for key in ("em_mean", "f1_mean", "peak_tokens_mean", "turns_mean"):
        assert key in result, sorted(result)
    # per-task figures in task order (what scripts/paired_eval.py pairs)
    assert result["per_task"]["task_index"] == [0.0, 1.0, 2.0]
    assert sum(result["per_task"]["em"]) / 3 == pytest.approx(result["em_mean"])
    lines = (tmp_path / "eval.transcripts.jsonl").read_text().splitlines()
    assert len(lines) == 3 and result["transcripts"].endswith("eval.transcripts.jsonl")
    episode = json.loads(lines[0])
    assert episode["prompt"] and episode["turns"] and "em" in episode
    assert episode["peak_tokens"] > max(t["context_tokens"] for t in episode["turns"])
    assert all({"context_tokens", "generated", "observation"} <= set(t) for t in episode["turns"])

    # --eval-set plays a named set of eval_extra instead: its env.config, tasks from its offset,
    # kept beside the main set's results under the run's eval/, not over them.
    out = memrl_cli("eval", str(run), "--episodes", "2", "--eval-set", "unseen", timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    kept = json.loads((run / "eval" / "unseen.iter_000002.json").read_text())
    assert kept["eval_set"] == "unseen" and kept["per_task"]["task_index"] == [38.0, 39.0]
    assert (
        len((run / "eval" / "unseen.iter_000002.transcripts.jsonl").read_text().splitlines()) == 2
    )
    assert json.loads((run / "eval" / "iter_000002.json").read_text())["episodes"] == 3
    out = memrl_cli("eval", str(run), "--episodes", "2", "--eval-set", "unsen", timeout=600)
    assert out.returncode != 0
    assert "--eval-set 'unsen' is not one of this run's evaluation sets" in out.stderr
    assert "(algorithm.eval_extra: unseen)" in out.stderr


def test_grpo_packed_trains_and_resumes(tmp_path):
    cfg = _config(tmp_path, "grpo", algorithm="grpo", sequence_mode="packed", group_size=2)
    # With LoRA: the reference is the base model (adapters off) and syncs carry only adapters.
    data = yaml.safe_load(cfg.read_text())
    data["model"]["lora"] = {"enabled": True, "r": 4, "alpha": 8}
    cfg.write_text(yaml.safe_dump(data))
    run = tmp_path / "grpo_run"
    out = memrl_cli("train", str(cfg), "--output", str(run), timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    out = memrl_cli(
        "train", str(cfg), "--output", str(run), "--resume", "--stop-iters", "2", timeout=600
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    frame = pd.read_parquet(run / "metrics.parquet")
    assert frame["training_iteration"].tolist() == [1, 2]
    assert any(c.endswith("ref_kl") for c in frame.columns)
    assert not any(c.endswith("vf_loss") for c in frame.columns)  # GRPO has no critic

    # The run on storage (file:// takes the path of s3:// and gs://), with the local run gone:
    # eval rebuilds the tiny model from the copy's tiny_model/ and writes the transcripts back.
    import shutil

    stored = tmp_path / "bucket" / "grpo_run"
    shutil.copytree(run, stored)
    shutil.rmtree(run)
    out = memrl_cli("eval", stored.as_uri(), "--episodes", "2", timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    uri_ckpt = f"{stored.as_uri()}/checkpoints/iter_000002"
    assert f"{uri_ckpt}: 2 episodes" in out.stdout
    kept = json.loads((stored / "eval" / "iter_000002.json").read_text())
    assert kept["episodes"] == 2 and kept["checkpoint"] == uri_ckpt and "em_mean" in kept
    lines = (stored / "eval" / "iter_000002.transcripts.jsonl").read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[0])["turns"]
    assert not run.exists()  # nothing was written to the old local path


def test_grpo_needs_whole_groups_per_runner(tmp_path):
    from memrl.experiment.config import load_config

    exp = load_config(_config(tmp_path, "bad", algorithm="grpo", group_size=3))
    with pytest.raises(ValueError, match="multiple of algorithm.group_size"):
        exp.algorithm.make_algorithm_config(exp)


def test_imitation_and_raft_with_dynamic_sampling_train(tmp_path):
    # imitation: each iteration imitates fresh episodes of the scripted agent (all solved).
    cfg = _config(tmp_path, "imitation", algorithm="imitation", kl_coef=0.0, num_minibatches=2)
    run = tmp_path / "imitation_run"
    out = memrl_cli("train", str(cfg), "--output", str(run), "--stop-iters", "2", timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    frame = pd.read_parquet(run / "metrics.parquet")

    def column(name: str) -> pd.Series:
        (found,) = [c for c in frame.columns if c.endswith(name)]
        return frame[found]

    # 4 episodes per iteration; the scripted agent misses some within 3 turns, and only the
    # solved ones are imitated.
    kept = column("update_episodes").tolist()
    assert all(0 < n <= 4 for n in kept)
    assert column("update_share").tolist() == [n / 4 for n in kept]
    nll = column("learner_nll").tolist()
    assert nll[1] < nll[0]  # the second batch's tasks are new, the skill is not
    assert not any(c.endswith("policy_loss") for c in frame.columns)
    steps = frame["env_steps_sampled"].tolist()
    assert steps[1] > steps[0] > 0

    # RAFT: the random tiny model solves nothing, so dynamic sampling samples twice and the
    # iteration ends without a step (and still checkpoints).
    cfg = _config(
        tmp_path,
        "raft",
        algorithm="raft",
        group_size=2,
        kl_coef=0.0,
        dynamic_sampling=1,
        dynamic_sampling_rounds=2,
    )
    run = tmp_path / "raft_run"
    out = memrl_cli("train", str(cfg), "--output", str(run), timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    frame = pd.read_parquet(run / "metrics.parquet")
    assert column("sample_rounds").tolist() == [2.0]
    assert column("update_episodes").tolist() == [0.0]
    assert frame["env_steps_sampled"].iloc[0] > 0
    assert (run / "checkpoints" / "iter_000001").is_dir()
