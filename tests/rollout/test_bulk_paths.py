"""The bulk path against RLlib's episode path (no Ray): the same seed and weights give the same
actions, rewards, trial returns and GAE targets; its metrics, env recreation and refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from memrl_testing import bulk_config, learner_for, trial_chunks
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
from ray.rllib.evaluation.postprocessing import Postprocessing

from memrl.experiment.build import build_algorithm_config
from memrl.experiment.config import parse_config
from memrl.rollout.env_runner import BulkEnvRunner
from memrl.rollout.learner import BulkPPOLearner, BulkUpdate, flat_minibatches, rollout_batch

NUM_ENVS = 5
STEPS = 200  # 40 rows per env: trials of 30 steps end inside every rollout


KEY_DOOR = {"config": {"size": 4, "episode_len": 6, "trial_len": 30}}
SHORT_TRIALS = {"config": {"size": 4, "episode_len": 2, "trial_len": 2}}
CORRIDOR = {"id": "memrl/MemoryCorridor-v0", "config": {"length": 4, "episodes_per_trial": 6}}


def _config(sampler: str, env: dict | None = None, **resources):
    model = {"type": "mlp", "hiddens": [16]}
    return bulk_config(
        sampler, model, envs=NUM_ENVS, steps=STEPS, minibatch=50, seed=3, env=env, **resources
    )


def _learner(env: dict | None = None):
    config = _config("bulk", env)
    runner = BulkEnvRunner(config=config)
    built = learner_for(config, runner)
    runner.stop()
    assert isinstance(built, BulkPPOLearner)
    return built


@pytest.fixture(scope="module")
def learner():
    return _learner()


@pytest.mark.parametrize("explore, stepping", [(True, "vector"), (False, "vector"), (True, "sync")])
def test_same_seed_same_actions_returns_and_advantages(learner, explore, stepping):
    """RLlib's runner on the native vector env against the bulk runner on the native vector env
    or on gymnasium's SyncVectorEnv of single envs (what fault injection uses)."""
    _compare(learner, explore, KEY_DOOR, stepping)


def test_same_on_the_corridor():
    """Terminated trials (the corridor's end) instead of truncated ones."""
    _compare(_learner(CORRIDOR), True, CORRIDOR, "vector")


def _compare(learner, explore: bool, env: dict, stepping: str) -> list[int]:
    """Compares three rollouts with RLlib's episodes; returns their row counts."""
    rows = []
    old = SingleAgentEnvRunner(config=_config("episodes", env))
    new = BulkEnvRunner(config=_config("bulk", env, env_vectorize_mode=stepping))
    for a, b in zip(
        old.module.state_dict().values(), new.module.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b)
    module = learner.module[DEFAULT_MODULE_ID].unwrapped()
    for round_ in range(3):
        torch.manual_seed(round_)
        episodes = old.sample(num_timesteps=STEPS, explore=explore)
        torch.manual_seed(round_)
        (rollout,) = new.sample(num_timesteps=STEPS, explore=explore)
        rows.append(rollout.num_steps)
        assert len(rollout) == sum(len(e) for e in episodes)
        chunks = trial_chunks(rollout)
        assert len(chunks) == len(episodes)
        assert any(e.is_done for e in episodes)
        for (n, start, end), episode in zip(chunks, episodes, strict=True):
            np.testing.assert_array_equal(rollout.actions[start:end, n], episode.get_actions())
            np.testing.assert_array_equal(rollout.rewards[start:end, n], episode.get_rewards())
            np.testing.assert_array_equal(
                rollout.trial_t[start:end, n], episode.t_started + np.arange(end - start)
            )
            np.testing.assert_allclose(
                rollout.obs[start:end, n], np.asarray(episode.get_observations())[:-1]
            )
            if explore:  # greedy actions: RLlib stores a deterministic distribution's 0
                np.testing.assert_allclose(
                    rollout.logp[start:end, n],
                    episode.get_extra_model_outputs(Columns.ACTION_LOGP),
                    rtol=1e-6,
                )
            assert bool(rollout.terminated[end - 1, n] or rollout.truncated[end - 1, n]) == (
                episode.is_done
            )
        # GAE: RLlib's learner connectors over the episodes against the arrays, same values.
        batch = learner._learner_connector(
            rl_module=learner.module,
            batch={},
            episodes=episodes,
            shared_data={},
            metrics=learner.metrics,
        )[DEFAULT_MODULE_ID]
        mask = batch[Columns.LOSS_MASK].bool()
        theirs = batch[Postprocessing.VALUE_TARGETS][mask].numpy()
        ours = rollout_batch(module, [rollout], gamma=0.99, lambda_=0.95, standardize=False)
        # rollout_batch keeps (t, n) order; RLlib's batch goes episode by episode.
        order = np.zeros(rollout.valid.shape, np.int64)
        order[rollout.valid] = np.arange(int(rollout.valid.sum()))
        index = np.concatenate([order[s:e, n] for n, s, e in trial_chunks(rollout)])
        np.testing.assert_allclose(
            ours[Postprocessing.VALUE_TARGETS].numpy()[index], theirs, rtol=1e-4, atol=1e-5
        )
        advantages = ours[Postprocessing.VALUE_TARGETS] - ours[Columns.VF_PREDS]
        np.testing.assert_allclose(
            ours[Postprocessing.ADVANTAGES].numpy(), advantages.numpy(), rtol=1e-4, atol=1e-5
        )
    old.stop()
    new.stop()
    return rows


def test_a_rollout_that_outgrows_its_first_allocation_keeps_its_rows_aligned():
    """Two-step trials: a third of the rows are reset rows, more than the first allocation has
    room for (40 rows per env, plus 1 + 40 // 8), so each rollout grows while it is filled; its
    rows still match RLlib's episodes step for step."""
    rows = _compare(_learner(SHORT_TRIALS), True, SHORT_TRIALS, "vector")
    per_env = STEPS // NUM_ENVS
    assert min(rows) > per_env + 1 + per_env // 8


def test_metrics_count_env_steps_trials_and_inner_episodes():
    runner = BulkEnvRunner(config=_config("bulk"))
    ended = 0
    for _ in range(4):
        (rollout,) = runner.sample(num_timesteps=STEPS)
        assert len(rollout) >= STEPS
        assert rollout.valid[:-1].sum() < STEPS  # stops at the first row that reaches STEPS
        ended += int((rollout.terminated | rollout.truncated).sum())
    metrics = runner.get_metrics()
    runner.stop()
    assert metrics["num_env_steps_sampled_lifetime"].peek() >= 4 * STEPS
    assert metrics["num_episodes_lifetime"].peek() == ended
    assert metrics["episode_len_mean"].peek() == 30
    # 6-step inner episodes (or shorter) in 30-step trials.
    assert metrics["inner_episodes"].peek() >= 5


def test_a_failed_env_step_recreates_the_envs_and_the_rollout_starts_over():
    runner = BulkEnvRunner(config=_config("bulk"))
    runner.sample(num_timesteps=STEPS)
    env = runner.env.env
    calls = {"n": 0}
    step = env.step

    def failing(actions):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("injected")
        return step(actions)

    env.step = failing
    (rollout,) = runner.sample(num_timesteps=STEPS)
    assert runner.env.env is not env  # recreated
    assert len(rollout) >= STEPS and rollout.valid[0].all()  # fresh trials from row 0
    metrics = runner.get_metrics()
    runner.stop()
    assert metrics["num_env_step_failures"].peek() == 1


def test_episodes_requests_use_rllibs_path_then_bulk_starts_fresh_trials():
    runner = BulkEnvRunner(config=_config("bulk"))
    runner.sample(num_timesteps=STEPS)
    episodes = runner.sample(num_episodes=2, explore=False)
    assert len(episodes) >= 2 and all(e.is_done for e in episodes)
    (rollout,) = runner.sample(num_timesteps=STEPS)
    runner.stop()
    assert rollout.valid[0].all()


def test_minibatches_cover_every_step_once_per_epoch():
    batch = {
        Columns.ACTIONS: torch.arange(103),
        Postprocessing.ADVANTAGES: torch.arange(103).float(),
    }
    chunks = list(flat_minibatches("p", batch, 25, num_epochs=2, seed=0))
    assert len(chunks) == 8
    seen = [c.policy_batches["p"][Columns.ACTIONS] for c in chunks]
    for epoch in (seen[:4], seen[4:]):
        assert sorted(torch.cat(epoch).tolist()) == list(range(103))
        assert {len(s) for s in epoch} <= {25, 26}
    assert not torch.equal(torch.cat(seen[:4]), torch.cat(seen[4:]))  # shuffled anew


def test_each_update_shuffles_its_minibatches_anew():
    """The minibatch order of an update depends on the learner's weights version: the update
    after the first cuts the same rollout into other minibatches."""
    learner = _learner()
    runner = BulkEnvRunner(config=_config("bulk"))
    (rollout,) = runner.sample(num_timesteps=STEPS)
    runner.stop()
    module = learner.module[DEFAULT_MODULE_ID].unwrapped()
    config = learner.config.get_config_for_module(DEFAULT_MODULE_ID)

    def first_minibatch() -> torch.Tensor:
        update = BulkUpdate(DEFAULT_MODULE_ID, module, config, [rollout], 50, 1)
        first = next(iter(learner.rollout_minibatches(update)))
        return first.policy_batches[DEFAULT_MODULE_ID][Columns.ACTION_LOGP]

    before = first_minibatch()
    torch.testing.assert_close(first_minibatch(), before)  # the same update: the same order
    learner.update(episodes=[rollout], num_epochs=1, minibatch_size=50, timesteps={})
    assert not torch.equal(first_minibatch(), before)


def test_train_batch_rows_hold_what_was_acted_on_and_standardized_advantages(learner):
    """Row i of the train batch holds the observation its action was chosen on (the acting
    module gives back the stored logits and log-prob there), and its advantage standardized over
    the real steps: the raw advantages shifted to mean 0 and scaled to std 1."""
    runner = BulkEnvRunner(config=_config("bulk"))
    runner.sample(num_timesteps=STEPS)
    (rollout,) = runner.sample(num_timesteps=STEPS)
    module = learner.module[DEFAULT_MODULE_ID].unwrapped()
    batch = rollout_batch(module, [rollout], gamma=0.99, lambda_=0.95)
    with torch.no_grad():
        out = runner.module.forward_exploration({Columns.OBS: batch[Columns.OBS]})
    runner.stop()
    logits = out[Columns.ACTION_DIST_INPUTS]
    torch.testing.assert_close(logits, batch[Columns.ACTION_DIST_INPUTS], rtol=1e-5, atol=1e-5)
    logp = torch.log_softmax(logits, -1).gather(1, batch[Columns.ACTIONS][:, None].long())
    torch.testing.assert_close(logp[:, 0], batch[Columns.ACTION_LOGP], rtol=1e-5, atol=1e-5)
    raw = rollout_batch(module, [rollout], gamma=0.99, lambda_=0.95, standardize=False)
    raw = raw[Postprocessing.ADVANTAGES]
    assert abs(float(raw.mean())) > 0.1 * float(raw.std(correction=0))  # centring matters
    adv = batch[Postprocessing.ADVANTAGES]
    assert float(adv.mean()) == pytest.approx(0.0, abs=1e-5)
    assert float(adv.std(correction=0)) == pytest.approx(1.0, rel=1e-4)
    torch.testing.assert_close(adv, (raw - raw.mean()) / raw.std(correction=0))


def test_bulk_refused_where_it_cannot_run():
    with pytest.raises(ValueError, match="in the runner's process"):
        _config("bulk", env_vectorize_mode="async")
    with pytest.raises(ValueError, match="one learner"):
        _config("bulk", num_learners=2)
    assert _config("auto", num_learners=2).env_runner_cls is None
    assert _config("auto").env_runner_cls is BulkEnvRunner
    assert _config("auto", env_vectorize_mode="sync").env_runner_cls is BulkEnvRunner
    lstm = parse_config({"model": {"type": "lstm"}, "resources": {"sampler": "bulk"}})
    assert build_algorithm_config(lstm).env_runner_cls.__name__ == "RecurrentBulkEnvRunner"
    corridor = parse_config({"env": {"id": "memrl/MemoryCorridor-v0"}, "model": {"type": "mlp"}})
    assert build_algorithm_config(corridor).env_runner_cls is BulkEnvRunner
    cartpole = parse_config({"env": {"id": "CartPole-v1"}, "model": {"type": "mlp"}})
    assert build_algorithm_config(cartpole).env_runner_cls is None  # no native vector form


def test_an_update_trains_and_counts_every_step_each_epoch(learner):
    from ray.rllib.utils.metrics import ALL_MODULES, NUM_ENV_STEPS_TRAINED

    runner = BulkEnvRunner(config=_config("bulk"))
    (rollout,) = runner.sample(num_timesteps=STEPS)
    runner.stop()
    before = [p.detach().clone() for p in learner.module[DEFAULT_MODULE_ID].parameters()]
    results = learner.update(episodes=[rollout], num_epochs=3, minibatch_size=50, timesteps={})
    trained = results[ALL_MODULES][NUM_ENV_STEPS_TRAINED]
    assert (trained.peek() if hasattr(trained, "peek") else trained) == 3 * len(rollout)
    after = list(learner.module[DEFAULT_MODULE_ID].parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
    # The fused Adam steps every parameter, and its state round-trips through a checkpoint.
    optimizer = learner.get_optimizer(DEFAULT_MODULE_ID)
    assert optimizer.defaults["fused"] is True
    assert all(int(optimizer.state[p]["step"]) == 3 * 4 for p in after)
    restored = _learner()
    restored.set_state(learner.get_state())
    again = restored.get_optimizer(DEFAULT_MODULE_ID)
    assert again.defaults["fused"] is True
    params = restored.module[DEFAULT_MODULE_ID].parameters()
    for new, old in zip(params, after, strict=True):
        assert torch.equal(again.state[new]["exp_avg"], optimizer.state[old]["exp_avg"])
