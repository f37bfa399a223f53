"""``TextEnvRunner``: an RLlib EnvRunner that drives a batch of multi-turn text envs with an LLM.

Each ``sample()`` plays ``rounds_per_sample`` rounds; in a round every env plays one episode, all
generating together through the configured backend (``rollout`` in memrl/methods/mem1/rollout.py).
With ``group_size`` g, envs 0..g-1 share a task, g..2g-1 the next one, and so on (GRPO groups; the
group id names this runner, round and slot, so groups never mix tasks). Weights arrive through
RLlib's ``sync_weights`` -> ``set_state`` and are pushed into the generation backend.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch
from ray.rllib.core import COMPONENT_RL_MODULE, DEFAULT_MODULE_ID
from ray.rllib.env import INPUT_ENV_SPACES
from ray.rllib.env.env_runner import EnvRunner
from ray.rllib.utils.checkpoints import Checkpointable
from ray.rllib.utils.metrics import (
    EPISODE_LEN_MEAN,
    EPISODE_RETURN_MAX,
    EPISODE_RETURN_MEAN,
    EPISODE_RETURN_MIN,
    NUM_ENV_STEPS_SAMPLED,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    NUM_EPISODES,
    NUM_EPISODES_LIFETIME,
    WEIGHTS_SEQ_NO,
)

from memrl.envs.text import text_space
from memrl.methods.mem1.generation import GenerationSettings, make_backend
from memrl.methods.mem1.rollout import TextEpisode, rollout, transcript

logger = logging.getLogger(__name__)


class TextEnvRunner(EnvRunner, Checkpointable):
    """Steps ``num_envs_per_env_runner`` text envs together with the LLM RLModule."""

    def __init__(self, *, config: Any, **kwargs: Any) -> None:
        super().__init__(config=config, **kwargs)
        self.worker_index = kwargs.get("worker_index", 0) or 0
        self.settings = self.config.mem1
        self.policy = self.config.context_policy
        self._weights_seq_no = 0
        self._round = 0
        self._scripted_done = 0  # scripted episodes this runner played (algorithm: imitation)
        self._rng = np.random.default_rng(self._seed if self._seed is not None else None)
        self.make_env()
        self.make_module()

    # -- construction ---------------------------------------------------------------------------

    def _build_env(self, overrides: dict[str, Any] | None = None, index: int = 0) -> Any:
        from ray.rllib.env.env_context import EnvContext
        from ray.tune.registry import ENV_CREATOR, _global_registry

        env_config = {**dict(self.config.env_config), **(overrides or {})}
        name = self.config.env
        if isinstance(name, str) and _global_registry.contains(ENV_CREATOR, name):
            creator = _global_registry.get(ENV_CREATOR, name)
            ctx = EnvContext(
                env_config,
                worker_index=self.worker_index,
                vector_index=index,
                num_workers=self.num_workers,
            )
            return creator(ctx)
        from memrl.envs import make_env

        return make_env(self.config.text_env_id, env_config)

    def make_env(self) -> None:
        n = self.config.num_envs_per_env_runner
        self.envs = [self._build_env(index=i) for i in range(n)]
        self.env = self.envs[0]
        self._eval_envs: dict[str, list[Any]] = {}

    def make_module(self) -> None:
        spec = self.config.get_rl_module_spec(spaces=self.get_spaces(), inference_only=True)
        self.module = spec.build()
        if self.config.num_gpus_per_env_runner > 0 and torch.cuda.is_available():
            self.module.to("cuda")
        self.module.eval()
        self.tokenizer = self.module.tokenizer
        gen = GenerationSettings(**self.module.model_config.get("generation", {}))
        if self._seed is not None:
            gen = GenerationSettings(**{**gen.__dict__, "seed": gen.seed + self._seed})
        self.backend = make_backend(
            gen,
            self.module.policy.lm,
            self.tokenizer,
            self.module.model_config["path"],
            compute_dtype=self.module.policy.compute_dtype,
        )

    # -- EnvRunner API --------------------------------------------------------------------------

    def assert_healthy(self) -> None:
        assert self.envs and self.module is not None, "TextEnvRunner has no envs or module"

    def get_spaces(self) -> dict[str, Any]:
        space = text_space()
        return {INPUT_ENV_SPACES: (space, space), DEFAULT_MODULE_ID: (space, space)}

    def sample(
        self, *, explore: bool = True, num_episodes: int | None = None, **kwargs: Any
    ) -> list[TextEpisode]:
        """``rounds_per_sample`` rounds of one episode per env (or enough rounds for
        ``num_episodes``); returns the finished episodes (greedy when not ``explore``)."""
        s = self.settings
        out: list[TextEpisode] = []
        rounds = s.rounds_per_sample
        if num_episodes is not None:
            rounds = -(-num_episodes // len(self.envs))
        if s.algorithm == "imitation":
            out = self._scripted(rounds * len(self.envs))
            self._log_episodes(out)
            return out[:num_episodes] if num_episodes is not None else out
        for _ in range(rounds):
            n = len(self.envs)
            options, groups, seeds = [], [], []
            for slot in range(n // s.group_size):
                task = int(self._rng.integers(s.train_tasks)) if s.train_tasks else None
                seed = int(self._rng.integers(2**31))
                for _ in range(s.group_size):
                    options.append({"task_index": task} if task is not None else None)
                    groups.append(f"w{self.worker_index}-r{self._round}-g{slot}")
                    seeds.append(seed)
            self._round += 1
            episodes = self._rollout(
                self.envs, options, greedy=not explore, group_ids=groups, seeds=seeds
            )
            self._log_episodes(episodes)
            out += episodes
        return out[:num_episodes] if num_episodes is not None else out

    def _scripted(self, count: int) -> list[TextEpisode]:
        """``count`` episodes of the env's scripted agent (``algorithm: imitation``) on the
        warm start's tasks (``warm_start.env_config``), continuing after the ones it imitated;
        runners take turns, so no two runners play the same task index in the same pass."""
        from memrl.methods.mem1.warm_start import scripted_episodes

        s = self.settings
        ws = s.warm_start
        runners = max(1, self.num_workers)
        start = ws.task_offset + ws.episodes + self._scripted_done * runners
        start += max(0, self.worker_index - 1) * count
        self._scripted_done += count
        return scripted_episodes(
            self.config.text_env_id,
            ws.env(dict(self.config.env_config)),
            self.tokenizer,
            policy=self.policy,
            prompt=s.prompt,
            episodes=count,
            task_offset=start,
            max_obs_tokens=s.max_obs_tokens,
        )

    def _rollout(
        self, envs: list[Any], options: list[Any], *, greedy: bool, **kwargs: Any
    ) -> list[TextEpisode]:
        """One episode per env with this runner's model, policy and limits."""
        s = self.settings
        return rollout(
            envs,
            self.backend,
            self.tokenizer,
            policy=self.policy,
            prompt=s.prompt,
            max_tokens_per_turn=s.max_tokens_per_turn,
            max_obs_tokens=s.max_obs_tokens,
            reset_options=options,
            greedy=greedy,
            **kwargs,
        )

    def evaluate(
        self,
        task_indices: list[int],
        env_config: dict[str, Any] | None = None,
        key: str = "main",
        *,
        greedy: bool = True,
        transcripts: bool = False,
    ) -> list[dict[str, Any]]:
        """Episodes on an evaluation set (greedy unless ``greedy`` is false), one row per task.

        ``env_config``: env.config overrides of its envs (default: ``eval_env_config``, the test
        split); ``key``: the set's name (its envs are built once and kept); ``transcripts``: each
        row also holds the episode as text under ``transcript``.
        """
        s = self.settings
        if key not in self._eval_envs:
            overrides = s.eval_env_config if env_config is None else env_config
            self._eval_envs[key] = [
                self._build_env(overrides, index=i) for i in range(len(self.envs))
            ]
        envs = self._eval_envs[key]
        rows = []
        n = len(envs)
        for start in range(0, len(task_indices), n):
            chunk = task_indices[start : start + n]
            episodes = self._rollout(
                envs[: len(chunk)], [{"task_index": t} for t in chunk], greedy=greedy
            )
            for task, ep in zip(chunk, episodes, strict=True):
                row: dict[str, Any] = {
                    **ep.info,  # the env's outcome figures (doc-QA: em_q1.., values_found, ..)
                    "task_index": task,
                    "em": ep.info.get("em", ep.env_reward),
                    "f1": ep.info.get("f1", 0.0),
                    "reward": ep.env_reward,
                    "turns": float(len(ep)),
                    "seconds": ep.seconds,
                    **ep.memory_metrics(),
                }
                if transcripts:
                    row["transcript"] = transcript(ep, self.tokenizer)
                rows.append(row)
        return rows

    def _log_episodes(self, episodes: list[TextEpisode]) -> None:
        steps = sum(len(ep) for ep in episodes)
        m = self.metrics
        m.log_value(NUM_ENV_STEPS_SAMPLED, steps, reduce="sum")
        m.log_value(NUM_ENV_STEPS_SAMPLED_LIFETIME, steps, reduce="lifetime_sum")
        m.log_value(NUM_EPISODES, len(episodes), reduce="sum")
        m.log_value(NUM_EPISODES_LIFETIME, len(episodes), reduce="lifetime_sum")
        win = max(1, len(episodes))
        for ep in episodes:
            m.log_value(EPISODE_RETURN_MEAN, ep.env_reward, window=win)
            m.log_value(EPISODE_RETURN_MIN, ep.env_reward, reduce="min", window=win)
            m.log_value(EPISODE_RETURN_MAX, ep.env_reward, reduce="max", window=win)
            m.log_value(EPISODE_LEN_MEAN, len(ep), window=win)
            m.log_value("format_errors_mean", ep.format_errors, window=win)
            m.log_value("seconds_per_episode", ep.seconds, window=win)
            for key in ("em", "f1"):
                if key in ep.info:
                    m.log_value(f"{key}_mean", ep.info[key], window=win)
            for key, value in ep.memory_metrics().items():
                m.log_value(key, value, window=win)
        self.num_env_steps_sampled_lifetime += steps

    def get_metrics(self) -> dict[str, Any]:
        return self.metrics.reduce()

    # -- state (weights in, checkpoints) --------------------------------------------------------

    def get_state(
        self, components: Any = None, *, not_components: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        state: dict[str, Any] = {
            WEIGHTS_SEQ_NO: self._weights_seq_no,
            NUM_ENV_STEPS_SAMPLED_LIFETIME: self.num_env_steps_sampled_lifetime,
        }
        if self._check_component(COMPONENT_RL_MODULE, components, not_components):
            state[COMPONENT_RL_MODULE] = self.module.get_state(
                inference_only=kwargs.get("inference_only", False)
            )
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        if COMPONENT_RL_MODULE in state:
            seq_no = state.get(WEIGHTS_SEQ_NO, 0)
            if seq_no == 0 or self._weights_seq_no < seq_no:
                module_state = state[COMPONENT_RL_MODULE]
                if not isinstance(module_state, dict):
                    import ray

                    module_state = ray.get(module_state)
                if DEFAULT_MODULE_ID in module_state:
                    module_state = module_state[DEFAULT_MODULE_ID]
                self.module.set_state(module_state)
                self.backend.update_weights(self.module.policy.lm)
            if seq_no > 0:
                self._weights_seq_no = seq_no
        if NUM_ENV_STEPS_SAMPLED_LIFETIME in state:
            self.num_env_steps_sampled_lifetime = state[NUM_ENV_STEPS_SAMPLED_LIFETIME]

    def get_ctor_args_and_kwargs(self) -> tuple[tuple, dict[str, Any]]:
        return (), {"config": self.config}

    def get_checkpointable_components(self) -> list[tuple[str, Any]]:
        return [(COMPONENT_RL_MODULE, self.module)]

    def stop(self) -> None:
        for env in self.envs + [e for envs in self._eval_envs.values() for e in envs]:
            env.close()
