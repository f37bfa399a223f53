"""Memo trained data-parallel: several learners (DDP over gloo on CPU) agree with one.

- Every learner makes the same number of minibatches and keeps the same value statistics, even
  when their shards hold different numbers of rows (two real gloo processes, no Ray).
- DDP is told of parameters a loss pass leaves without a gradient exactly when there can be some.
- Through RLlib with 2 CPU learners: the loss curve on fixed episodes is one learner's, the two
  learners hold the same weights, and uneven shards do not hang (the run has a timeout).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest
import torch
from memrl_testing import REPO, needs_cxx, start_forked_processes
from ray.rllib.core.columns import Columns

from memrl.methods.memo.rlmodule import MemoRLModule
from memrl.methods.memo.settings import MemoModelSettings

torch.set_num_threads(1)  # small shared machines: one thread per test process

# Rows per learner and loss steps per row: 3 long rows on one learner, 5 short ones on the other
# (as RLlib's episode sharding can leave them); 30-step minibatches would make 4 on the second
# (ceil(120 / 30), one row at least each) but only 3 on the first.
SHARDS = [[40, 40, 40], [40, 20, 20, 20, 20]]
TARGETS = [[1.0, 2.0, 3.0], [10.0, 20.0, 30.0, 40.0, 50.0, 60.0]]


def _learner_side(rank: int, init_file: str, out_dir: str) -> None:
    import torch.distributed as dist

    from memrl.methods.memo.learner import row_minibatches
    from memrl.methods.memo.value_head import PopArtHead

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        steps = SHARDS[rank]
        mask = torch.zeros(len(steps), max(steps), dtype=torch.bool)
        for i, n in enumerate(steps):
            mask[i, :n] = True
        batch = {"default_policy": {Columns.LOSS_MASK: mask, Columns.OBS: torch.zeros(mask.shape)}}
        counts = [
            len(list(row_minibatches(batch, 30, 1, sum(steps), same_count=same)))
            for same in (True, False)
        ]
        head = PopArtHead(4, decay=0.5)
        head.update(torch.tensor(TARGETS[rank]))
        mean, std = head.stats()
        result = {"counts": counts, "mean": float(mean), "std": float(std)}
        with open(os.path.join(out_dir, f"{rank}.json"), "w") as f:
            json.dump(result, f)
    finally:
        dist.destroy_process_group()


def test_learners_make_equal_minibatch_counts_and_share_value_statistics(tmp_path):
    # Forked from a fresh interpreter that has torch and RLlib imported (memrl_testing says why).
    args = (str(tmp_path / "init"), str(tmp_path))
    start_forked_processes(_learner_side, args, nprocs=2, workdir=tmp_path)
    results = [json.loads((tmp_path / f"{r}.json").read_text()) for r in (0, 1)]
    own = [r["counts"][1] for r in results]
    assert own == [3, 4]  # left alone they differ: DDP would wait forever for the 4th all-reduce
    assert [r["counts"][0] for r in results] == [3, 3]  # the fewest any learner can fill
    # The value normalization moves with the moments of all learners' targets together.
    single = PopArtHeadStats(TARGETS[0] + TARGETS[1])
    for r in results:
        assert r["mean"] == pytest.approx(single[0], rel=1e-6)
        assert r["std"] == pytest.approx(single[1], rel=1e-6)


def PopArtHeadStats(targets: list[float]) -> tuple[float, float]:  # noqa: N802
    from memrl.methods.memo.value_head import PopArtHead

    head = PopArtHead(4, decay=0.5)
    head.update(torch.tensor(targets))
    mean, std = head.stats()
    return float(mean), float(std)


OBS = gym.spaces.Box(-1.0, 1.0, (5,), np.float32)
ACT = gym.spaces.Discrete(3)
NET = dict(d_model=16, n_layers=1, n_heads=2, l_seg=4, l_sum=2, encoder_hiddens=[16])


@pytest.mark.parametrize(
    "kw",
    [
        dict(mode="memo"),
        dict(mode="rmt"),
        dict(mode="fct"),
        dict(mode="memo", max_summaries=1),
        dict(mode="memo", critic="separate"),
        dict(mode="memo", critic="detached"),
        dict(mode="memo", layer_drop=0.9),
    ],
    ids=lambda kw: "-".join(str(v) for v in kw.values()),
)
def test_ddp_is_told_of_unused_parameters_exactly_when_a_loss_pass_leaves_some(kw):
    settings = MemoModelSettings(**{**NET, **kw})
    torch.manual_seed(1)  # with layer_drop 0.9, this draw skips the one layer
    module = MemoRLModule(
        observation_space=OBS, action_space=ACT, model_config=settings.model_config()
    )
    module.train()
    out = module.forward_train({Columns.OBS: torch.randn(2, 11, 5)})
    (out[Columns.ACTION_DIST_INPUTS].sum() + out["memo_vf_preds"].sum()).backward()
    unused = [n for n, p in module.named_parameters() if p.grad is None]
    assert bool(unused) == settings.leaves_parameters_unused(), unused


# One learner and two DDP learners (gloo) update from the same episodes and starting weights;
# run in its own interpreter with a timeout, so a hang fails the test instead of blocking it.
DDP_SCRIPT = textwrap.dedent(
    """
    import json, math, sys
    from pathlib import Path
    from ray.rllib.utils.minibatch_utils import ShardEpisodesIterator
    import numpy as np, torch
    from memrl_testing import TINY, TINY_MEMO
    from memrl.experiment.build import build_algorithm_config
    from memrl.experiment.config import parse_config
    from memrl.experiment.ray_session import ray_session
    from memrl.experiment.checkpoints import build_algo

    torch.set_num_threads(1)
    out = Path(sys.argv[1])
    compiled = sys.argv[2] == "compiled"  # the two DDP learners compile their trunks

    def algo(learners):
        model = {**TINY_MEMO, "compile_learner": compiled and learners > 0}
        exp = parse_config({**TINY, "model": model, "algorithm": {
            "name": "ppo", "train_batch_size": 400, "minibatch_size": 400, "num_epochs": 1},
            "resources": {"num_env_runners": 0, "num_envs_per_env_runner": 4,
                          "num_learners": learners, "sampler": "episodes"}})
        return build_algo(build_algorithm_config(exp), out / f"rllib{learners}")

    def losses(results):
        return float(np.mean([r["default_policy"]["total_loss"].peek() for r in results]))

    def weights(group):
        states = group.foreach_learner(lambda l: {
            k: v.detach().numpy().copy()
            for k, v in l.module["default_policy"].unwrapped().state_dict().items()})
        return [s.get() for s in states]

    with ray_session(None, num_cpus=3):
        one = algo(0)
        episodes = one.env_runner.sample(num_timesteps=400, random_actions=False)
        two = algo(2)
        two.learner_group.set_weights(one.learner_group.get_weights())
        curves = {}
        for name, a in (("one", one), ("two", two)):
            curves[name] = [losses(a.learner_group.update(
                episodes=episodes, num_epochs=1, minibatch_size=400, timesteps={}))
                for _ in range(5)]
        # Shards with different row counts: RLlib gives one learner two 40-step rows and the
        # other a 40-step and two 20-step rows; alone, they would make 2 and 3 minibatches.
        by_len = {n: [e for e in episodes if len(e) == n] for n in (20, 40)}
        uneven = by_len[40][:3] + by_len[20][:2]
        shards = ShardEpisodesIterator(uneven, 2, len_lookback_buffer=41)
        natural = [min(math.ceil(sum(len(e) for e in s) / 20), len(s)) for s in shards]
        for _ in range(2):
            two.learner_group.update(episodes=uneven, num_epochs=2, minibatch_size=20, timesteps={})
        w = weights(two.learner_group)
        diff = max(float(np.abs(w[0][k] - w[1][k]).max()) for k in w[0])
        lengths = sorted(len(e) for e in episodes)
        one.stop(); two.stop()
    print("RESULT " + json.dumps(
        {"curves": curves, "learner_diff": diff, "lengths": lengths, "natural": natural}))
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("trunks", ["eager", pytest.param("compiled", marks=needs_cxx)])
def test_two_cpu_learners_follow_one_learners_loss_curve_without_hanging(tmp_path, trunks):
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'tests'}"}
    out = subprocess.run(
        [sys.executable, "-c", DDP_SCRIPT, str(tmp_path), trunks],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    result = json.loads(out.stdout.split("RESULT ", 1)[1])
    print(f"\nFIGURES {json.dumps(result)}")
    assert result["lengths"].count(40) >= 3 and result["lengths"].count(20) >= 2
    assert sorted(result["natural"]) == [2, 3]  # the uneven update really had unequal shards
    one, two = np.array(result["curves"]["one"]), np.array(result["curves"]["two"])
    assert one[-1] < one[0] and two[-1] < two[0]  # both learn on these episodes
    # The same curve within noise: the two learners only standardize advantages per shard.
    assert np.abs(one - two).max() < 0.05 * np.abs(one).max(), (one, two)
    assert result["learner_diff"] == 0.0  # DDP keeps both learners' weights identical
