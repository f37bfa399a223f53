"""RLlib's LSTM on the bulk path against its episode path (no Ray): same seed, same actions, and
the same GAE targets from values computed from the stored recurrent states; training sequences
of max_seq_len steps that start from the state their first step acted from."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from memrl_testing import bulk_config, learner_for, trial_chunks
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
from ray.rllib.evaluation.postprocessing import Postprocessing

from memrl.rollout.learner import BulkUpdate
from memrl.rollout.recurrent_learner import (
    RecurrentBulkPPOLearner,
    recurrent_gae,
    sequence_batch,
)
from memrl.rollout.recurrent_runner import STATE_IN, RecurrentBulkEnvRunner

STEPS = 60
SEQ = 7


def _config(sampler: str):
    model = {"type": "lstm", "lstm_cell_size": 8, "hiddens": [8], "max_seq_len": SEQ}
    return bulk_config(sampler, model, envs=3, steps=STEPS, minibatch=30, seed=2)


def test_lstm_bulk_acts_and_estimates_as_the_episode_path():
    config = _config("bulk")
    assert config.env_runner_cls is RecurrentBulkEnvRunner
    old = SingleAgentEnvRunner(config=_config("episodes"))
    new = RecurrentBulkEnvRunner(config=config)
    learner = learner_for(config, new)
    assert isinstance(learner, RecurrentBulkPPOLearner)
    module = learner.module[DEFAULT_MODULE_ID].unwrapped()
    for round_ in range(4):
        torch.manual_seed(round_)
        episodes = old.sample(num_timesteps=STEPS, explore=True)
        torch.manual_seed(round_)
        (rollout,) = new.sample(num_timesteps=STEPS, explore=True)
        chunks = trial_chunks(rollout)
        assert len(chunks) == len(episodes)
        for (n, s, e), episode in zip(chunks, episodes, strict=True):
            np.testing.assert_array_equal(rollout.actions[s:e, n], episode.get_actions())
            np.testing.assert_allclose(
                rollout.logp[s:e, n],
                episode.get_extra_model_outputs(Columns.ACTION_LOGP),
                rtol=1e-5,
            )
        theirs = learner._learner_connector(
            rl_module=learner.module,
            batch={},
            episodes=episodes,
            shared_data={},
            metrics=learner.metrics,
        )[DEFAULT_MODULE_ID]
        mask = theirs[Columns.LOSS_MASK].bool()
        _, targets, _ = recurrent_gae(module, rollout, gamma=0.99, lambda_=0.95)
        ours = np.concatenate([targets.numpy()[s:e, n] for n, s, e in chunks])
        np.testing.assert_allclose(
            ours, theirs[Postprocessing.VALUE_TARGETS][mask].numpy(), rtol=1e-4, atol=1e-5
        )
    old.stop()
    new.stop()


def test_sequences_start_from_the_state_their_first_step_acted_from(lstm_rollout):
    learner, rollout = lstm_rollout
    module = learner.module[DEFAULT_MODULE_ID].unwrapped()
    batch = sequence_batch(module, [rollout], max_seq_len=SEQ, gamma=0.99, lambda_=0.95)
    mask = batch[Columns.LOSS_MASK]
    assert int(mask.sum()) == len(rollout) and mask.shape[1] == SEQ
    assert bool(mask[:, 0].all())  # every sequence starts with a real step
    # The module run over each sequence from its stored state gives the actions' log-probs
    # the runner recorded: the sequences hold what was acted on, in order.
    with torch.no_grad():
        out = module.forward_train(
            {Columns.OBS: batch[Columns.OBS], Columns.STATE_IN: batch[Columns.STATE_IN]}
        )
    dist = module.get_train_action_dist_cls().from_logits(out[Columns.ACTION_DIST_INPUTS])
    logp = dist.logp(batch[Columns.ACTIONS])
    np.testing.assert_allclose(
        logp[mask].numpy(), batch[Columns.ACTION_LOGP][mask].numpy(), rtol=1e-4, atol=1e-5
    )
    assert set(batch[Columns.STATE_IN]) == set(rollout.extras[STATE_IN])


def test_an_lstm_update_trains_every_step():
    from ray.rllib.utils.metrics import ALL_MODULES, NUM_ENV_STEPS_TRAINED

    config = _config("bulk")
    runner = RecurrentBulkEnvRunner(config=config)
    (rollout,) = runner.sample(num_timesteps=STEPS)
    learner = learner_for(config, runner)
    runner.stop()
    results = learner.update(episodes=[rollout], num_epochs=2, minibatch_size=30, timesteps={})
    trained = results[ALL_MODULES][NUM_ENV_STEPS_TRAINED]
    assert (trained.peek() if hasattr(trained, "peek") else trained) == 2 * len(rollout)


@pytest.fixture(scope="module")
def lstm_rollout():
    """A learner and a rollout that starts mid-trial (its trials end at different rows, so the
    sequences leave padding)."""
    config = _config("bulk")
    runner = RecurrentBulkEnvRunner(config=config)
    runner.sample(num_timesteps=STEPS)
    (rollout,) = runner.sample(num_timesteps=STEPS)
    learner = learner_for(config, runner)
    runner.stop()
    return learner, rollout


def test_advantages_are_standardized_over_the_real_steps_only(lstm_rollout):
    """Mean 0 and std 1 over the loss mask, 0 on the sequences' padding: the raw advantages of
    the real steps shifted and scaled by their own statistics."""
    learner, rollout = lstm_rollout
    module = learner.module[DEFAULT_MODULE_ID].unwrapped()
    kw = dict(max_seq_len=SEQ, gamma=0.99, lambda_=0.95)
    batch = sequence_batch(module, [rollout], **kw)
    raw = sequence_batch(module, [rollout], standardize=False, **kw)[Postprocessing.ADVANTAGES]
    mask = batch[Columns.LOSS_MASK]
    assert int((~mask).sum()) >= SEQ  # padding the statistics must leave out
    adv = batch[Postprocessing.ADVANTAGES]
    real = raw[mask]
    torch.testing.assert_close(adv[mask], (real - real.mean()) / real.std(correction=0))
    assert bool((adv[~mask] == 0).all())


def test_each_epoch_shuffles_the_sequences_anew(lstm_rollout):
    learner, rollout = lstm_rollout
    module = learner.module[DEFAULT_MODULE_ID].unwrapped()
    config = learner.config.get_config_for_module(DEFAULT_MODULE_ID)
    update = BulkUpdate(DEFAULT_MODULE_ID, module, config, [rollout], 30, 2)
    minibatches = list(learner.rollout_minibatches(update))
    half = len(minibatches) // 2
    assert half >= 2

    def order(epoch) -> torch.Tensor:  # each sequence by its first step's log-prob
        return torch.cat(
            [m.policy_batches[DEFAULT_MODULE_ID][Columns.ACTION_LOGP][:, 0] for m in epoch]
        )

    first, second = order(minibatches[:half]), order(minibatches[half:])
    assert sorted(first.tolist()) == sorted(second.tolist())  # every sequence once per epoch
    assert not torch.equal(first, second)
