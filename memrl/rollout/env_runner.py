"""``BulkEnvRunner``: RLlib's single-agent env runner with a bulk sampling path for vector envs.

``sample(num_timesteps=...)`` (what PPO's training step calls) steps the vector env (the env's
native vector form, or gymnasium's SyncVectorEnv of single envs, e.g. with fault injection) and
fills one preallocated ``Rollout`` (arrays.py): one policy forward pass and one env step per vector
step, array operations over all envs for the bookkeeping, and Python per env only where a trial
ends (its return and length go into RLlib's episode metrics). It returns ``[rollout]``; the bulk
learner (learner.py) trains on it directly.

Everything else is RLlib's: weights and connector state (``get_state`` / ``set_state``), metrics
(``get_metrics``: ``episode_return_mean``, ``episode_len_mean``, ``num_env_steps_sampled``, ...,
plus memrl's ``inner_*`` per trial), env recreation after a failed step
(``restart_failed_sub_environments``), and ``sample(num_episodes=...)`` / random actions, which
run RLlib's episode path (evaluation); the bulk path starts over with fresh trials after it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import torch
from gymnasium.wrappers.vector import DictInfoToList
from ray.rllib.callbacks.utils import make_callback
from ray.rllib.core.columns import Columns
from ray.rllib.env.env_runner import ENV_STEP_FAILURE, NUM_ENV_STEP_FAILURES_LIFETIME
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
from ray.rllib.utils.metrics import SAMPLE_TIMER, WEIGHTS_SEQ_NO

from memrl.rollout.arrays import Rollout
from memrl.rollout.trial_metrics import MAX_INDEXED, log_trial_inner_episodes

logger = logging.getLogger(__name__)


class BulkEnvRunner(SingleAgentEnvRunner):
    """SingleAgentEnvRunner whose timestep sampling fills a ``Rollout``; see the module
    docstring."""

    def __init__(self, *, config: Any, **kwargs: Any) -> None:
        super().__init__(config=config, **kwargs)
        # The vector env's state between sample() calls; None: the envs need a reset.
        self._next_obs: np.ndarray | None = None
        self._seeded = False

    def sample(
        self,
        *,
        num_timesteps: int | None = None,
        num_episodes: int | None = None,
        explore: bool | None = None,
        random_actions: bool = False,
        force_reset: bool = False,
    ) -> list[Any]:
        """A list of one ``Rollout`` of at least ``num_timesteps`` env steps (default: the
        rollout fragment length times the envs); with ``num_episodes`` or ``random_actions``,
        RLlib's episodes."""
        if num_episodes is not None or random_actions:
            # RLlib's path resets the envs; the bulk path must not continue its old trials.
            self._next_obs = None
            return super().sample(
                num_timesteps=num_timesteps,
                num_episodes=num_episodes,
                explore=explore,
                random_actions=random_actions,
                force_reset=force_reset,
            )
        if self.env is None:
            raise ValueError(f"{self} has no env; it cannot sample")
        self.metrics.log_value(key=WEIGHTS_SEQ_NO, value=self._weights_seq_no, window=1)
        with self.metrics.log_time(SAMPLE_TIMER):
            if explore is None:
                explore = self.config.explore
            if num_timesteps is None:
                num_timesteps = (
                    self.config.get_rollout_fragment_length(self.worker_index) * self.num_envs
                )
            rollout = self._sample_rollout(int(num_timesteps), bool(explore), force_reset)
            samples = [rollout]
            make_callback(
                "on_sample_end",
                callbacks_objects=self._callbacks,
                callbacks_functions=self.config.callbacks_on_sample_end,
                kwargs=dict(env_runner=self, metrics_logger=self.metrics, samples=samples),
            )
        self._time_after_sampling = time.perf_counter()
        return samples

    def _sample_rollout(self, num_timesteps: int, explore: bool, force_reset: bool) -> Rollout:
        n = self.num_envs
        if force_reset or self._next_obs is None:
            self._reset_all()
        # One row per env and vector step; reset rows (not env steps) may need a few more.
        capacity = -(-num_timesteps // n)
        rollout = self._empty(capacity + 1 + capacity // 8)
        rollout.obs[0] = self._next_obs
        t = steps = episodes = 0
        while steps < num_timesteps:
            if t == rollout.num_steps:
                rollout = _grown(rollout, self._empty(rollout.num_steps))
            rollout.valid[t] = ~self._done
            rollout.trial_t[t] = self._trial_t
            self._act(rollout, t, explore)
            results = self._step(rollout.actions[t])
            if results is ENV_STEP_FAILURE:
                # RLlib recreated the env: every trial starts over, the partial rollout is
                # dropped (as RLlib's episode path drops its ongoing episodes).
                self._reset_all()
                rollout.obs[0] = self._next_obs
                t = steps = 0
                continue
            obs, rewards, terminated, truncated, infos = results
            rollout.obs[t + 1] = obs
            rollout.rewards[t] = rewards
            rollout.terminated[t] = terminated
            rollout.truncated[t] = truncated
            steps += int(rollout.valid[t].sum())
            episodes += self._track(rollout, t, infos)
            t += 1
        self._next_obs = rollout.obs[t].copy()
        self._log_env_steps(metric=self._metrics_num_env_steps_sampled, num_steps=steps)
        self._increase_sampled_metrics(steps, episodes)
        return rollout.truncate(t)

    def _empty(self, steps: int) -> Rollout:
        return Rollout.empty(
            steps,
            self.num_envs,
            self.env.single_observation_space,
            self.env.single_action_space,
            self._dist_dim,
        )

    def _step(self, actions: np.ndarray) -> Any:
        """One vector-env step, with infos as the env gives them (dicts of arrays over envs):
        RLlib's ``DictInfoToList`` wrapper, which makes one dict per env, is stepped around.
        A failing step is handled as RLlib's ``_try_env_step`` does."""
        env = self.env.env if isinstance(self.env, DictInfoToList) else self.env
        try:
            return env.step(actions)
        except Exception as err:
            self.metrics.log_value(NUM_ENV_STEP_FAILURES_LIFETIME, 1, reduce="lifetime_sum")
            if not self.config.restart_failed_sub_environments:
                raise RuntimeError(
                    "env step failed and fault_tolerance.restart_failed_sub_environments is "
                    f"off: {err!r}"
                ) from err
            logger.exception("env step failed; recreating the envs: %s", err)
            self.make_env()
            return ENV_STEP_FAILURE

    def _module_inputs(self, rollout: Rollout, t: int) -> dict[str, Any]:
        """The module's input batch for row ``t`` (subclasses add their columns)."""
        return {Columns.OBS: torch.from_numpy(rollout.obs[t]).to(self._device)}

    @torch.no_grad()
    def _act(self, rollout: Rollout, t: int, explore: bool) -> None:
        """The policy's actions, log-probs and distribution inputs for row ``t``, all envs in
        one forward pass."""
        batch = self._module_inputs(rollout, t)
        if explore:
            out = self.module.forward_exploration(batch)
            dist = self.module.get_exploration_action_dist_cls().from_logits(
                out[Columns.ACTION_DIST_INPUTS]
            )
            actions = dist.sample()
        else:
            out = self.module.forward_inference(batch)
            dist = self.module.get_inference_action_dist_cls().from_logits(
                out[Columns.ACTION_DIST_INPUTS]
            )
            actions = dist.to_deterministic().sample()
        rollout.actions[t] = actions.reshape(rollout.actions[t].shape).cpu().numpy()
        rollout.logp[t] = dist.logp(actions).reshape(-1).cpu().numpy()
        rollout.dist_inputs[t] = out[Columns.ACTION_DIST_INPUTS].reshape(self.num_envs, -1).cpu()
        self._after_forward(out)

    def _after_forward(self, out: dict[str, Any]) -> None:
        """What a subclass keeps of the module's output (e.g. its recurrent state)."""

    @property
    def _dist_dim(self) -> int:
        space = self.env.single_action_space
        if not hasattr(space, "n"):
            raise ValueError(
                f"the bulk env runner needs a discrete action space, got {space}; set "
                "resources.sampler to 'episodes'"
            )
        return int(space.n)

    def _reset_all(self) -> None:
        """New trials in every env (seeded with the runner's seed the first time)."""
        obs, _ = self._try_env_reset(seed=None if self._seeded else self._seed, options=None)
        self._seeded = True
        n = self.num_envs
        self._next_obs = obs
        self._done = np.zeros(n, bool)
        self._trial_t = np.zeros(n, np.int32)
        self._return = np.zeros(n, np.float64)
        self._length = np.zeros(n, np.int64)
        self._started = np.full(n, time.perf_counter())
        self._inner_first = np.zeros((n, MAX_INDEXED), np.float64)
        self._inner_later = np.zeros(n, np.float64)
        self._inner_count = np.zeros(n, np.int64)
        self._inner_successes = np.zeros(n, np.int64)

    def _track(self, rollout: Rollout, t: int, infos: dict[str, Any]) -> int:
        """Episode bookkeeping of row ``t``; logs every trial that ended there and returns how
        many did."""
        valid = rollout.valid[t]
        self._return += rollout.rewards[t]
        self._length += valid
        if "_inner_episode_done" in infos:
            ends = infos["_inner_episode_done"] & infos["inner_episode_done"]
            rollout.inner_done[t] = ends
            self._track_inner(ends, infos)
        self._done = rollout.terminated[t] | rollout.truncated[t]
        # The reset row that follows a trial's end sees its final observation at the trial's
        # length; the row after it starts the next trial at step 0.
        self._trial_t = np.where(valid, self._trial_t + 1, 0).astype(np.int32)
        finished = np.flatnonzero(self._done)
        now = time.perf_counter()
        for i in finished:
            self._log_episode_metrics(
                int(self._length[i]), float(self._return[i]), now - self._started[i]
            )
            count = int(self._inner_count[i])
            if count:
                later = count - MAX_INDEXED
                log_trial_inner_episodes(
                    self.metrics,
                    self._inner_first[i, : min(count, MAX_INDEXED)].tolist(),
                    self._inner_later[i] / later if later > 0 else None,
                    count,
                    int(self._inner_successes[i]),
                )
        if len(finished):
            self._return[finished] = 0.0
            self._length[finished] = 0
            self._started[finished] = now
            self._inner_first[finished] = 0.0
            self._inner_later[finished] = 0.0
            self._inner_count[finished] = 0
            self._inner_successes[finished] = 0
        return len(finished)

    def _track_inner(self, ends: np.ndarray, infos: dict[str, Any]) -> None:
        """Records the inner episodes that ended at this step (array operations over envs)."""
        envs = np.flatnonzero(ends)
        k = self._inner_count[envs]
        returns = np.asarray(infos["inner_episode_return"], np.float64)[envs]
        first = k < MAX_INDEXED
        self._inner_first[envs[first], k[first]] = returns[first]
        self._inner_later[envs[~first]] += returns[~first]
        self._inner_count[envs] += 1
        self._inner_successes[envs] += np.asarray(infos["inner_episode_success"], bool)[envs]


def _grown(rollout: Rollout, more: Rollout) -> Rollout:
    """``rollout`` with ``more``'s rows appended (its obs row 0 replaced by the bootstrap slot)."""
    return Rollout(
        obs=np.concatenate([rollout.obs, more.obs[1:]]),
        actions=np.concatenate([rollout.actions, more.actions]),
        logp=np.concatenate([rollout.logp, more.logp]),
        dist_inputs=np.concatenate([rollout.dist_inputs, more.dist_inputs]),
        rewards=np.concatenate([rollout.rewards, more.rewards]),
        terminated=np.concatenate([rollout.terminated, more.terminated]),
        truncated=np.concatenate([rollout.truncated, more.truncated]),
        valid=np.concatenate([rollout.valid, more.valid]),
        inner_done=np.concatenate([rollout.inner_done, more.inner_done]),
        trial_t=np.concatenate([rollout.trial_t, more.trial_t]),
        extras=rollout.extras,
    )
