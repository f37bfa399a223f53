"""Memo on the bulk path against RLlib's episode path (no Ray): the same seed and weights act the
same, and the learner rows (observations from trial step 0, loss mask, GAE) come out the same from
the arrays as from the episode chunks, for rollouts that start and end mid-trial."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
from memrl_testing import TINY_MEMO, bulk_config, learner_for, trial_chunks
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
from ray.rllib.evaluation.postprocessing import Postprocessing

from memrl.methods.memo.bulk_learner import MemoBulkLearner, memo_rollout_batch, trial_rows
from memrl.methods.memo.bulk_runner import MemoBulkEnvRunner
from memrl.methods.memo.columns import BEHAVIOUR_WEIGHTS, MEMO_PREFIX_OBS, MEMO_SEG_LEN
from memrl.rollout.arrays import ACTED_BEHIND, Rollout

NUM_ENVS = 3
STEPS = 60  # 20 rows per env: 30-step trials span rollouts


def _config(sampler: str, mode: str = "memo"):
    model = {**TINY_MEMO, "mode": mode}
    return bulk_config(sampler, model, envs=NUM_ENVS, steps=STEPS, minibatch=30, seed=5)


@pytest.mark.parametrize("mode", ["memo", "fct", "rmt"])
def test_bulk_memo_acts_and_batches_as_the_episode_path(mode):
    config = _config("bulk", mode)
    assert config.env_runner_cls is MemoBulkEnvRunner
    old = SingleAgentEnvRunner(config=_config("episodes", mode))
    new = MemoBulkEnvRunner(config=config)
    learner = learner_for(config, new)
    assert isinstance(learner, MemoBulkLearner)
    module = learner.module[DEFAULT_MODULE_ID].unwrapped()
    weights = zip(old.module.state_dict().values(), new.module.state_dict().values(), strict=True)
    assert all(torch.equal(a, b) for a, b in weights)
    mid_trial = 0
    for round_ in range(4):
        torch.manual_seed(round_)
        episodes = old.sample(num_timesteps=STEPS, explore=True)
        torch.manual_seed(round_)
        (rollout,) = new.sample(num_timesteps=STEPS, explore=True)
        chunks = trial_chunks(rollout)
        assert len(chunks) == len(episodes)
        for (n, s, e), episode in zip(chunks, episodes, strict=True):
            np.testing.assert_array_equal(rollout.actions[s:e, n], episode.get_actions())
            assert rollout.extras[MEMO_SEG_LEN] == int(
                episode.get_extra_model_outputs(MEMO_SEG_LEN)[0]
            )
            mid_trial += episode.t_started > 0
        ours = memo_rollout_batch(
            module, [rollout], gamma=0.99, lambda_=0.95, update_value_norm=False
        )
        theirs = learner._learner_connector(
            rl_module=learner.module,
            batch={},
            episodes=episodes,
            shared_data={},
            metrics=learner.metrics,
        )[DEFAULT_MODULE_ID]
        rows = trial_rows(rollout)["row"]
        order = [int(rows[s, n]) for n, s, _ in chunks]
        for key in (
            Columns.OBS,
            Columns.ACTIONS,
            Columns.LOSS_MASK,
            MEMO_SEG_LEN,
            Postprocessing.VALUE_TARGETS,
            Postprocessing.ADVANTAGES,
        ):
            np.testing.assert_allclose(
                ours[key][order].float().numpy(),
                theirs[key].float().numpy(),
                rtol=1e-4,
                atol=1e-4,
                err_msg=key,
            )
    assert mid_trial >= NUM_ENVS  # rows that needed the context before their rollout
    old.stop()
    new.stop()


def test_a_rollout_that_starts_mid_trial_needs_its_prefix():
    new = MemoBulkEnvRunner(config=_config("bulk"))
    new.sample(num_timesteps=STEPS)
    (rollout,) = new.sample(num_timesteps=STEPS)
    new.stop()
    assert (rollout.trial_t[0] > 0).any()
    rollout.extras.pop("memo_prefix_obs")
    with pytest.raises(ValueError, match="without its trial's observations"):
        trial_rows(rollout)


def test_new_weights_rebuild_only_the_caches_of_ongoing_trials(monkeypatch):
    runner = MemoBulkEnvRunner(config=_config("bulk"))
    rebuilt = []
    net = runner.module.net
    prefill = net.prefill
    monkeypatch.setattr(
        net, "prefill", lambda x, *a, **k: rebuilt.append(len(x)) or prefill(x, *a, **k)
    )
    runner.sample(num_timesteps=STEPS)  # 20 rows of 30-step trials: all mid-trial
    keeper = runner.module._keeper
    runner.set_state(runner.get_state())
    assert sum(rebuilt) == NUM_ENVS and (keeper.lengths == 20).all()
    rebuilt.clear()
    runner.sample(num_timesteps=NUM_ENVS * 10)  # every trial ends at the rollout's last row
    assert runner._done.all()
    runner.set_state(runner.get_state())
    assert rebuilt == [] and (keeper.lengths == 0).all()
    # The reset row starts each cache afresh and the next trials run from step 0.
    (rollout,) = runner.sample(num_timesteps=STEPS)
    assert not rollout.valid[0].any() and (rollout.trial_t[1] == 0).all()
    np.testing.assert_array_equal(keeper.lengths, rollout.trial_t[-1] + 1)
    runner.stop()


def test_a_batch_acted_behind_is_clipped_around_the_learners_own_policy():
    """Decoupled PPO's columns: the learner's own log-probs before the update in place of the
    acting ones, and pi_prox / pi_behaviour per step; an on-time batch keeps the acting ones."""
    config = bulk_config("bulk", TINY_MEMO, envs=3, steps=60, minibatch=30, seed=5)
    runner = MemoBulkEnvRunner(config=config)
    module = learner_for(config, runner).module[DEFAULT_MODULE_ID].unwrapped()
    runner.sample(num_timesteps=60)  # the next rollout starts mid-trial
    (rollout,) = runner.sample(num_timesteps=60)
    runner.stop()
    assert (rollout.trial_t[0] > 0).any()

    def batch():
        return memo_rollout_batch(
            module, [rollout], gamma=0.99, lambda_=0.95, update_value_norm=False
        )

    on_time = batch()
    assert BEHAVIOUR_WEIGHTS not in on_time
    torch.manual_seed(0)
    with torch.no_grad():  # the learner has moved on since these weights acted
        for param in module.parameters():
            param.add_(0.1 * torch.randn_like(param))
    rollout.extras[ACTED_BEHIND] = True
    behind = batch()
    mask = behind[Columns.LOSS_MASK]
    torch.testing.assert_close(behind[Columns.ACTIONS], on_time[Columns.ACTIONS])
    acting = on_time[Columns.ACTION_LOGP][mask]
    with torch.no_grad():
        features = module.features(behind[Columns.OBS], behind[MEMO_SEG_LEN], False)
        dist = module.get_train_action_dist_cls().from_logits(module.pi(features))
        own = dist.logp(behind[Columns.ACTIONS])[mask]
    assert (own - acting).abs().max() > 1e-2
    torch.testing.assert_close(behind[Columns.ACTION_LOGP][mask], own, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(
        behind[BEHAVIOUR_WEIGHTS][mask], torch.exp(own - acting), rtol=1e-5, atol=1e-5
    )


def test_an_update_logs_the_statistics_of_its_last_minibatch(monkeypatch):
    """RLlib keeps an update's last logged value (window 1), so the learner computes its
    statistics on the first minibatch (for the pre-update ratio) and the last one only."""
    import memrl.methods.memo.learner as memo_learner

    config = bulk_config("bulk", TINY_MEMO, envs=3, steps=60, minibatch=20, seed=5)
    runner = MemoBulkEnvRunner(config=config)
    learner = learner_for(config, runner)
    (rollout,) = runner.sample(num_timesteps=60)
    runner.stop()
    variances = []  # per statistics block: over every loss step, then by trial quarter
    explained_variance = memo_learner.explained_variance

    def spy(targets, preds, mask):
        variances.append(explained_variance(targets, preds, mask))
        return variances[-1]

    monkeypatch.setattr(memo_learner, "explained_variance", spy)
    steps = []
    update = memo_learner.MemoPPOLearner.compute_loss_for_module

    def counted(self, **kwargs):
        steps.append(int(kwargs["batch"][Columns.LOSS_MASK].sum()))
        return update(self, **kwargs)

    monkeypatch.setattr(memo_learner.MemoPPOLearner, "compute_loss_for_module", counted)
    results = learner.update(episodes=[rollout], num_epochs=2, minibatch_size=20, timesteps={})
    assert len(steps) >= 4  # 2 epochs of 2+ minibatches
    assert len(variances) == 2 * 5  # two blocks: the first and the last minibatch
    logged = float(results[DEFAULT_MODULE_ID]["vf_explained_var"])
    assert logged == pytest.approx(float(variances[5]), nan_ok=True)


def test_rows_that_start_mid_trial_take_their_own_envs_earlier_observations():
    """Env 0 starts the rollout at a trial's first step, envs 1 and 2 mid-trial (steps 2 and 1):
    each row's context before the rollout is its own env's prefix, found by env index (env 0's
    prefix holds an older trial's observations, which no row may read)."""
    obs_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
    rollout = Rollout.empty(2, 3, obs_space, gym.spaces.Discrete(2), 2)
    rollout.valid[:] = True
    rollout.trial_t[0] = [0, 2, 1]
    rollout.trial_t[1] = rollout.trial_t[0] + 1
    rollout.obs[..., 0] = 1000 + 10 * np.arange(3)[:, None] + np.arange(3)[None, :]
    prefix = np.zeros((3, 2, 1), np.float32)
    prefix[..., 0] = 100 * (1 + np.arange(3))[:, None] + np.arange(2)[None, :]
    rollout.extras[MEMO_PREFIX_OBS] = prefix
    rows = trial_rows(rollout)
    for n, start in enumerate(rollout.trial_t[0]):
        row = rows["row"][0, n]
        np.testing.assert_array_equal(rows["obs"][row, :start], prefix[n, :start])
        np.testing.assert_array_equal(rows["obs"][row, start : start + 3], rollout.obs[:, n])
        assert rows["mask"][row].nonzero()[0].tolist() == [start, start + 1]


def test_the_bulk_batch_moves_the_value_statistics_with_the_loss_steps_only():
    """Rows that start mid-trial hold lookback steps and padding off the loss mask; the critic's
    value normalization moves with the targets of the loss steps alone (as the connector's)."""
    config = _config("bulk")
    runner = MemoBulkEnvRunner(config=config)
    module = learner_for(config, runner).module[DEFAULT_MODULE_ID].unwrapped()
    runner.sample(num_timesteps=STEPS)
    (rollout,) = runner.sample(num_timesteps=STEPS)  # rows from trial step 0, loss on 20..39
    runner.stop()
    before = copy.deepcopy(module.vf)
    batch = memo_rollout_batch(module, [rollout], gamma=0.99, lambda_=0.95)
    mask = batch[Columns.LOSS_MASK]
    targets = batch[Postprocessing.VALUE_TARGETS]
    assert int((~mask).sum()) >= int(mask.sum())  # as many steps off the loss as on it
    want, padded = copy.deepcopy(before), copy.deepcopy(before)
    want.update(targets[mask])
    padded.update(targets.flatten())
    for ours, theirs, wrong in zip(module.vf.stats(), want.stats(), padded.stats(), strict=True):
        assert float(ours) == pytest.approx(float(theirs), rel=1e-5)
        assert abs(float(theirs) - float(wrong)) > 1e-3 * max(1.0, abs(float(theirs)))


def test_a_rollout_records_the_segment_length_it_was_acted_with(monkeypatch):
    """With segment randomization, exploration acts with a drawn length (drawn anew with each
    new weights): the rollout records the length every step was acted with, l_seg when acting
    greedily."""
    runner = MemoBulkEnvRunner(config=_config("bulk"))
    module = runner.module
    assert module.seg_randomization
    keeper = module.keeper
    acted = []
    step = keeper.step
    monkeypatch.setattr(keeper, "step", lambda x, t, seg: acted.append(seg) or step(x, t, seg))
    recorded = []
    for explore in (True, True, True, False):
        runner.set_state(runner.get_state())  # new weights: a new draw
        acted.clear()
        (rollout,) = runner.sample(num_timesteps=STEPS, explore=explore)
        assert set(acted) == {rollout.extras[MEMO_SEG_LEN]}
        recorded.append(rollout.extras[MEMO_SEG_LEN])
    assert recorded[-1] == module.memo_cfg.l_seg
    assert any(seg != module.memo_cfg.l_seg for seg in recorded[:-1])
