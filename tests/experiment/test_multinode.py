"""memrl on a real multi-node Ray cluster on this machine (tests/local_cluster.py: one `ray start`
per node, each with its own raylet and resources), driven as a user drives a cloud cluster.

- Node types honoured: env runners pinned to `browser` nodes and the learner to the `learner` node
  run there, as Ray's state API (`ray list actors`) reports.
- A browser node lost mid-run (all its processes SIGKILLed, as a machine loss) while a second
  browser node joins: the runners come back on the new node, the run goes on and finishes, and
  metrics.parquet has every iteration once, each trained on a full batch.
- The learner's node lost: the job fails with one clear error line, and a second job with
  `--resume` continues from the first one's checkpoints in shared storage (a file:// URI).
- A Tune sweep spreads its trials over the nodes and survives the loss of a node that runs
  trials: Tune restarts them from their checkpoints (FailureConfig).

The figures each scenario measured (recovery time, iterations lost, placement) are printed.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest
import yaml
from local_cluster import LocalCluster, local_cluster, wait_for
from memrl_testing import REPO, write_config

from memrl.experiment.tables import read_table

pytestmark = pytest.mark.slow

ENV_RUNNER = "EnvRunner"  # RLlib's SingleAgentEnvRunner or memrl's BulkEnvRunner
LEARNER = "_WrappedExecutable"  # Ray Train's actor class, which RLlib's learners run in
TRIAL = "Trainable"  # Tune runs a trial in its wrapper class, with_resources' ResourceTrainable


@pytest.fixture(scope="module")
def cluster():
    """A head (1 CPU), a browser node (2 CPUs, browser: 2) and a learner node (1 CPU,
    learner: 1), stopped at the end of the module even if a test fails."""
    with local_cluster() as c:
        c.start_head(num_cpus=1)
        with ThreadPoolExecutor(2) as pool:  # worker nodes join side by side, as machines do
            joining = [
                pool.submit(c.add_node, "browser1", 2, {"browser": 2}),
                pool.submit(c.add_node, "learner1", 1, {"learner": 1}),
            ]
            for node in joining:
                node.result()
        yield c


def _rows(path: Path) -> pd.DataFrame:
    try:
        return read_table(path)
    except FileNotFoundError:  # not written yet
        return pd.DataFrame({"training_iteration": []})


def _figures(**values) -> None:
    print("\nFIGURES " + json.dumps(values, default=str))


def test_node_types_node_losses_and_resume_by_a_second_job(cluster: LocalCluster, tmp_path):
    storage = tmp_path / "shared"  # stands for storage every node (and a later job) reaches
    cfg = write_config(
        tmp_path / "pinned.yaml",
        name="pinned",
        resources={
            "num_env_runners": 2,
            "num_envs_per_env_runner": 2,
            "custom_resources_per_env_runner": {"browser": 1},
            "num_learners": 1,
            "custom_resources_per_learner": {"learner": 1},
        },
        fault_tolerance={"delay_between_env_runner_restarts_s": 0.5},
        # More iterations than the first job lives for: it ends with its learner's node.
        run={"stop_iters": 5000, "checkpoint_every": 2, "storage": storage.as_uri()},
    )
    metrics = storage / "pinned" / "metrics.parquet"
    # The same command as on a laptop, submitted with `ray job submit --working-dir .`.
    cluster.submit("first", ["memrl", "train", str(cfg)], cwd=REPO)
    wait_for(
        lambda: len(_rows(metrics)) >= 3,
        300,
        "three iterations of the first job",
        explain=lambda: cluster.logs("first"),
    )

    # Node types honoured, as Ray's state API sees it.
    runners, learners = cluster.actor_nodes(ENV_RUNNER), cluster.actor_nodes(LEARNER)
    assert runners == ["browser1", "browser1"] and learners == ["learner1"]

    # Lose the browser node; a second one joins.
    killed_at = cluster.kill_node("browser1")
    rows_at_kill = len(_rows(metrics))
    cluster.add_node("browser2", 2, {"browser": 2})
    wait_for(lambda: len(_rows(metrics)) > rows_at_kill + 1, 300, "iterations after the loss")
    recovered_s = time.time() - killed_at
    # Both runners back, on the new node (the second may come an iteration after the first).
    on_new_node = ["browser2", "browser2"]
    wait_for(lambda: cluster.actor_nodes(ENV_RUNNER) == on_new_node, 120, "runners on browser2")

    # Lose the learner's node: the job fails clearly. A new learner node starts meanwhile.
    rows_before = len(_rows(metrics))
    learner_killed_at = cluster.kill_node("learner1")
    with ThreadPoolExecutor(1) as pool:
        joining = pool.submit(cluster.add_node, "learner2", 1, {"learner": 1})
        status, logs = cluster.wait_job("first", timeout=300)
        failed_after_s = time.time() - learner_killed_at
        joining.result()
    assert status == "FAILED", logs[-3000:]
    assert "error: training stopped in iteration" in logs and "(a learner) was lost" in logs
    assert f"--output {storage.as_uri()}/pinned --resume" in logs
    assert "Traceback" not in logs.split("error: training stopped")[-1]
    failed = _rows(metrics)
    saved = max(int(p.name.split("_")[1]) for p in (storage / "pinned" / "checkpoints").iterdir())

    # A second job resumes from the first one's checkpoints, on the new learner node.
    end = saved + 3
    cluster.submit(
        "second", ["memrl", "train", str(cfg), "--resume", "--stop-iters", str(end)], cwd=REPO
    )
    status, logs = cluster.wait_job("second", timeout=600)
    assert status == "SUCCEEDED", logs[-3000:]
    assert f"resuming from {storage.as_uri()}/pinned/checkpoints/iter_{saved:06d}" in logs

    df = _rows(metrics)
    assert list(df.training_iteration) == list(range(1, end + 1))  # no gap, no duplicate
    # Every iteration trained on samples: a full batch (400 steps), but for the one the browser
    # node died in, which may have trained on what one runner returned before.
    steps = df.env_steps_sampled.diff().fillna(df.env_steps_sampled.iloc[0])
    partial = steps[steps != 400]
    assert len(partial) <= 1 and (partial > 0).all(), list(steps)
    assert df.env_runner_restarts.max() >= 2  # both runners came back on browser2
    last = storage / "pinned" / "checkpoints" / f"iter_{end:06d}" / "algorithm_state.pkl"
    assert last.is_file()
    assert yaml.safe_load((storage / "pinned" / "config.yaml").read_text())["name"] == "pinned"
    row = df[df.training_iteration == rows_at_kill + 1].iloc[0]
    _figures(
        placement_runners=runners,
        placement_learner=learners,
        runner_node_loss_recovery_s=round(recovered_s, 1),
        iteration_spanning_the_loss_s=round(float(row.time_this_iter_s), 1),
        runner_node_loss_iterations_lost=0,
        learner_node_loss_to_job_end_s=round(failed_after_s, 1),
        learner_node_loss_rows_written=len(failed),
        learner_node_loss_last_checkpoint=saved,
        learner_node_loss_iterations_redone=len(failed) - saved,
        rows_when_learner_killed=rows_before,
    )


def test_tune_spreads_trials_over_nodes_and_retries_those_of_a_lost_node(
    cluster: LocalCluster, tmp_path
):
    alive_cpus = sum(
        n["resources_total"].get("CPU", 0) for n in cluster.state("nodes", "state=ALIVE")
    )
    if alive_cpus < 4:  # four trials at once (the test before may have left fewer nodes)
        cluster.add_node("tune1", int(4 - alive_cpus), {})
    cfg = write_config(
        tmp_path / "sweep.yaml",
        name="sweep",
        resources={"num_env_runners": 0, "num_envs_per_env_runner": 2},
        # Long enough that all four trials run at once although their actors start seconds
        # apart on a loaded machine (with 8 iterations, trials ended before the last started;
        # on the bulk path 40 iterations take 6-10 s, and they did too).
        run={"stop_iters": 200},
        tune={
            "metric": "episode_return_mean",
            "mode": "max",
            "search_space": {"algorithm.lr": {"grid": [1.0e-4, 2.0e-4, 5.0e-4, 1.0e-3]}},
            "checkpoint_every": 1,
            "max_failures": 2,
        },
    )
    sweep = tmp_path / "shared" / "sweep"
    cluster.submit("sweep", ["memrl", "tune", str(cfg), "--output", str(sweep)], cwd=REPO)

    def explain() -> str:
        trials = sorted(d.name for d in sweep.iterdir() if d.is_dir()) if sweep.is_dir() else []
        nodes = [
            (n.get("node_name"), n.get("state"), n.get("resources_total"))
            for n in cluster.state("nodes")
        ]
        return f"trial dirs: {trials}\nnodes: {nodes}\njob log:\n{cluster.logs('sweep')}"

    def four_trials_checkpointed():
        if (sweep / "trials.parquet").exists():  # written when the sweep has ended
            pytest.fail(f"the sweep ended before four trials ran at once\n{explain()}")
        trials = [d for d in sweep.iterdir() if d.is_dir()] if sweep.is_dir() else []
        if sum(1 for d in trials if list(d.glob("checkpoint_*"))) < 4:
            return None
        hosts = cluster.actor_nodes(TRIAL)
        return hosts if len(hosts) == 4 else None

    hosts = wait_for(
        four_trials_checkpointed, 600, "four running trials with a checkpoint", explain=explain
    )
    assert len(set(hosts)) >= 2, hosts  # the trials run on several nodes
    victim = max((h for h in set(hosts) if h != "head"), key=hosts.count)
    killed_at = cluster.kill_node(victim)
    status, logs = cluster.wait_job("sweep", timeout=900)
    assert status == "SUCCEEDED", logs[-3000:]
    df = pd.read_parquet(sweep / "trials.parquet")
    assert list(df.status) == ["TERMINATED"] * 4 and list(df.iterations) == [200] * 4
    # The trials of the lost node went on from a checkpoint, not from scratch.
    restored = df[df.iterations_since_restore < df.iterations]
    assert len(restored) >= hosts.count(victim), df[["trial_id", "iterations_since_restore"]]
    _figures(
        trial_hosts=hosts,
        killed_node=victim,
        trials_restored=len(restored),
        iterations_since_restore=list(df.iterations_since_restore),
        sweep_end_after_kill_s=round(time.time() - killed_at, 1),
    )
