"""The MEM1 Algorithm on RLlib: text env runners sample, token learners update, weights sync back.

One ``training_step``:
1. every ``TextEnvRunner`` plays its batch of episodes (memrl/methods/mem1/env_runner.py);
2. episodes become rows of token sequences in the configured sequence mode
   (memrl/methods/mem1/batch.py), scored once before any update (current, reference, values),
   each learner scoring its share of the rows;
3. the episodes the update trains on are picked (memrl/methods/mem1/selection.py: RAFT keeps
   those that solved their task; GRPO with dynamic sampling keeps the groups whose rewards
   differ and samples again until enough do); advantages (memrl/methods/mem1/advantages.py):
   PPO sums KL-shaped token rewards plus the outcome at the episode's last token into returns
   (gamma = lambda = 1) minus the critic's values; GRPO normalizes each episode's reward within
   its own group and broadcasts it to the episode's tokens; RAFT and imitation train the NLL;
4. ``learner_group.update`` per minibatch (split into one shard of about equal tokens per
   learner), then ``sync_weights`` to the env runners (under FSDP after the learners gathered
   the full weights).
Metrics go to ``self.metrics``: env runner figures under ``env_runners/``, losses under
``learners/<module_id>/``, where the iteration's memory figures (``rollout_peak_tokens``, ...)
and evaluations (``eval_em``, ...) are repeated so that every run's metrics table has them.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig, NotProvided
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.execution.rollout_ops import synchronous_parallel_sample
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    ENV_RUNNER_SAMPLING_TIMER,
    LEARNER_RESULTS,
    LEARNER_UPDATE_TIMER,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    SYNCH_WORKER_WEIGHTS_TIMER,
    TIMERS,
)

from memrl.envs.doc_qa.env import VALUES_FOUND, VALUES_IN_STATE
from memrl.methods.mem1.advantages import add_advantages
from memrl.methods.mem1.batch import build_rows, row_lengths, shard_rows, slice_rows
from memrl.methods.mem1.context import ContextPolicy
from memrl.methods.mem1.selection import groups_with_signal, select_episodes

logger = logging.getLogger(__name__)

WARM_START_DIR = "warm_start_model"
"""Folder (in the algorithm's log directory, under the run's ``rllib/``) that holds the model
right after its warm start."""


class Mem1Config(AlgorithmConfig):
    """AlgorithmConfig of MEM1: ``mem1`` holds the ``Mem1Settings`` (settings.py, which builds
    this config: the settings import this module, never the reverse); ``text_env_id`` the env id.
    """

    def __init__(self, algo_class: type | None = None) -> None:
        super().__init__(algo_class=algo_class or Mem1Algorithm)
        self.mem1: Any = None  # the Mem1Settings, given with training(mem1=...)
        self.text_env_id = "memrl/DocQA-v0"
        from memrl.methods.mem1.env_runner import TextEnvRunner

        self.env_runner_cls = TextEnvRunner
        self.num_envs_per_env_runner = 8

    def get_default_learner_class(self) -> type:
        from memrl.methods.mem1.learner import TokenLearner

        return TokenLearner

    def get_default_rl_module_spec(self) -> RLModuleSpec:
        from memrl.methods.mem1.rlmodule import LLMRLModule

        return RLModuleSpec(module_class=LLMRLModule)

    def training(self, *, mem1: Any = NotProvided, **kwargs: Any) -> Mem1Config:
        super().training(**kwargs)
        if mem1 is not NotProvided:
            self.mem1 = mem1
        return self

    @property
    def context_policy(self) -> ContextPolicy:
        return ContextPolicy(self.mem1.context_policy, self.mem1.last_k)


class Mem1Algorithm(Algorithm):
    """Samples text episodes, trains the LLM on their generated tokens (PPO or GRPO)."""

    @classmethod
    def get_default_config(cls) -> Mem1Config:
        return Mem1Config()

    def setup(self, config: AlgorithmConfig) -> None:
        super().setup(config)
        from memrl.methods.mem1.network import load_tokenizer

        self._tokenizer = load_tokenizer(self.config.rl_module_spec.model_config["path"])
        self._iteration_seed = int(self.config.seed or 0)
        self.warm_start_losses: list[float] = []  # one loss per warm-start step, once it has run

    def _rows(self, episodes: list[Any]) -> dict[str, Any]:
        """The learner rows of these episodes, in the configured sequence mode."""
        s = self.config.mem1
        return build_rows(
            episodes,
            self.config.context_policy,
            s.sequence_mode,
            s.max_tokens_per_row,
            self._tokenizer.pad_token_id,
        )

    def _warm_start(self) -> None:
        from memrl.methods.mem1.warm_start import scripted_episodes

        s = self.config.mem1
        ws = s.warm_start
        started = time.monotonic()
        print(f"warm start: playing {ws.episodes:,} scripted episodes", flush=True)
        episodes = scripted_episodes(
            self.config.text_env_id,
            ws.env(dict(self.config.env_config)),
            self._tokenizer,
            policy=self.config.context_policy,
            prompt=s.prompt,
            episodes=ws.episodes,
            task_offset=ws.task_offset,
            max_obs_tokens=s.max_obs_tokens,
        )
        cols = self._rows(episodes)
        print(
            f"warm start: imitating {len(episodes):,} episodes ({len(cols['input_ids']):,} rows) "
            f"for {ws.epochs} epoch(s) | {time.monotonic() - started:.0f}s",
            flush=True,
        )
        # Every learner fits the same rows from the same weights with the same seed, so several
        # learners stay in step without gradient all-reduce (the lambda captures no Algorithm).
        seed = self._iteration_seed
        results = self.learner_group.foreach_learner(
            lambda learner: learner.sft_update(
                cols, epochs=ws.epochs, rows_per_batch=ws.rows_per_batch, lr=ws.lr, seed=seed
            )
        )
        losses = _first(results)
        self._gather_full_state()
        print(
            f"warm start: done, {len(losses):,} steps, loss {losses[0]:.3f} -> {losses[-1]:.3f}"
            f" | {time.monotonic() - started:.0f}s",
            flush=True,
        )
        self.warm_start_losses = losses
        self.env_runner_group.sync_weights(
            from_worker_or_learner_group=self.learner_group, inference_only=True
        )
        self._save_warm_start()

    def _save_warm_start(self) -> None:
        """Keeps the warmed-up model as a model folder beside the run's RLlib files, so minutes of
        imitation survive a crash before the first checkpoint and can start other runs
        (``model.path: DIR`` with ``warm_start.episodes: 0``)."""
        out = Path(self.logdir) / WARM_START_DIR
        results = self.learner_group.foreach_learner(lambda learner: learner.save_lm(str(out)))
        wrote = any(item.get() for item in results)
        if not wrote:
            print("warm start: model not saved as a folder (LoRA: it is in the checkpoints)")
            return
        self._tokenizer.save_pretrained(str(out))
        print(
            f"warm start: model saved to {out} (reuse: --set model.path={out} "
            "--set algorithm.warm_start.episodes=0)",
            flush=True,
        )

    def training_step(self) -> None:
        s = self.config.mem1
        # In the first iteration, not at setup: an algorithm restored from a checkpoint (resume,
        # `memrl eval`) has iteration > 0 and must not redo it.
        if self.iteration == 0 and s.warm_start.episodes > 0 and not self.warm_start_losses:
            self._warm_start()
        episodes, selected, rounds = self._sample_for_update()
        if not episodes:
            return
        evaluation = self._maybe_evaluate()

        with self.metrics.log_time((TIMERS, LEARNER_UPDATE_TIMER)):
            stats = self._rollout_stats(episodes)
            stats.update(
                evaluation,
                update_episodes=float(len(selected)),
                update_share=len(selected) / len(episodes),
                groups_with_signal=float(groups_with_signal(selected)),
                sample_rounds=float(rounds),
            )
            if selected:
                cols = self._rows(selected)
                scored = self._score(cols)
                stats.update(self._add_advantages(cols, scored, selected))
                self._update(cols, stats)
                self._gather_full_state()
            else:  # nothing to learn from (RAFT: no episode solved its task): no step
                self.metrics.log_dict(stats, key=(LEARNER_RESULTS, DEFAULT_MODULE_ID), window=1)

        with self.metrics.log_time((TIMERS, SYNCH_WORKER_WEIGHTS_TIMER)):
            self.env_runner_group.sync_weights(
                from_worker_or_learner_group=self.learner_group, inference_only=True
            )

    def _sample_once(self) -> list[Any]:
        """One ``sample()`` of every env runner, its metrics aggregated; the episodes."""
        with self.metrics.log_time((TIMERS, ENV_RUNNER_SAMPLING_TIMER)):
            sampled, runner_metrics = synchronous_parallel_sample(
                worker_set=self.env_runner_group,
                sample_timeout_s=self.config.sample_timeout_s,
                _uses_new_env_runners=True,
                _return_metrics=True,
            )
        self.metrics.aggregate(runner_metrics, key=ENV_RUNNER_RESULTS)
        return [ep for item in sampled for ep in (item if isinstance(item, list) else [item])]

    def _sample_for_update(self) -> tuple[list[Any], list[Any], int]:
        """Samples the iteration's episodes and picks those the update trains on
        (memrl/methods/mem1/selection.py); under ``dynamic_sampling`` samples again until the
        picked ones hold that many groups with signal, or ``dynamic_sampling_rounds`` samplings
        were made. Returns (every episode sampled, the picked ones, samplings made)."""
        s = self.config.mem1
        episodes: list[Any] = []
        selected: list[Any] = []
        rounds = 0
        while True:
            episodes += self._sample_once()
            rounds += 1
            selected = select_episodes(
                episodes,
                s.algorithm,
                format_penalty=s.format_penalty,
                dynamic_sampling=bool(s.dynamic_sampling),
            )
            if not s.dynamic_sampling or rounds >= s.dynamic_sampling_rounds:
                break
            if groups_with_signal(selected) >= s.dynamic_sampling:
                break
        return episodes, selected, rounds

    def _gather_full_state(self) -> None:
        """FSDP: all learners gather the full weights together, so that the first can hand them
        to weight syncs and checkpoints."""
        if self.config.mem1.fsdp:
            self.learner_group.foreach_learner(lambda learner: learner.gather_full_state())

    def _score(self, cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every learner scores its share of the rows; the shares are merged into (B, T). Only
        what the update reads is computed: the current log-probs with ``recompute_old_logp``,
        the reference's with a KL term, values for PPO; GRPO with neither scores nothing."""
        s = self.config.mem1
        likelihood = s.algorithm in ("raft", "imitation")  # no ratio: no old log-probs needed
        current, reference = s.recompute_old_logp and not likelihood, s.kl_coef > 0
        if not (current or reference or s.algorithm == "ppo"):
            return {}
        budget = s.micro_batch_tokens
        results = self.learner_group.foreach_learner(
            lambda learner: learner.score_rows(cols, budget, current=current, reference=reference)
        )
        return merge_scores([item.get() for item in results], cols["input_ids"].shape)

    def _update(self, cols: dict[str, np.ndarray], stats: dict[str, float]) -> None:
        s = self.config.mem1
        rows = cols["input_ids"].shape[0]
        rng = np.random.default_rng(self._iteration_seed)
        self._iteration_seed += 1
        keys = (
            "input_ids",
            "position_ids",
            "seg",
            "vis",
            "loss_mask",
            "old_logp",
            "advantages",
            "ref_logp",
            *(("old_values", "returns") if s.algorithm == "ppo" else ()),
        )
        lifetime = self.metrics.peek(
            (ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), default=0
        )
        for _ in range(s.num_epochs):
            for index in np.array_split(rng.permutation(rows), min(rows, s.num_minibatches)):
                sub = slice_rows({k: cols[k] for k in keys}, index)
                results = self.learner_group.update(
                    **learner_batches(sub, len(self.learner_group)),
                    timesteps={NUM_ENV_STEPS_SAMPLED_LIFETIME: lifetime},
                )
                self.metrics.aggregate(results, key=LEARNER_RESULTS)
        self.metrics.log_dict(stats, key=(LEARNER_RESULTS, DEFAULT_MODULE_ID), window=1)

    def _add_advantages(
        self, cols: dict[str, np.ndarray], scored: dict[str, np.ndarray], episodes: list[Any]
    ) -> dict[str, float]:
        """Adds old_logp, ref_logp, advantages (and PPO's old_values, returns) to ``cols``."""
        s = self.config.mem1
        return add_advantages(
            cols,
            scored,
            episodes,
            algorithm=s.algorithm,
            kl_coef=s.kl_coef,
            format_penalty=s.format_penalty,
            whiten=s.whiten_advantages,
            recompute_old_logp=s.recompute_old_logp and s.algorithm in ("ppo", "grpo"),
        )

    @staticmethod
    def _rollout_stats(episodes: list[Any]) -> dict[str, float]:
        """This iteration's memory and outcome figures (also under env_runners/, per runner)."""
        mem = [ep.memory_metrics() for ep in episodes]
        out = {f"rollout_{k}": float(np.mean([m[k] for m in mem])) for k in mem[0]}
        for key in ("em", "f1"):
            values = [ep.info[key] for ep in episodes if key in ep.info]
            if values:
                out[f"rollout_{key}"] = float(np.mean(values))
        out["rollout_seconds_per_episode"] = float(np.mean([ep.seconds for ep in episodes]))
        return out

    def _maybe_evaluate(self) -> dict[str, float]:
        s = self.config.mem1
        if not s.eval_every or self.iteration % s.eval_every:
            return {}
        result = {}
        for prefix, (env_config, offset) in s.eval_sets().items():
            tasks = list(range(offset, offset + s.eval_tasks))
            rows = self.evaluate_tasks(tasks, env_config=env_config, key=prefix or "main")
            result[f"eval_{prefix}em"] = float(np.mean([r["em"] for r in rows]))
            result[f"eval_{prefix}f1"] = float(np.mean([r["f1"] for r in rows]))
            if not prefix:
                result["eval_peak_tokens"] = float(np.mean([r["peak_tokens"] for r in rows]))
        self.metrics.log_dict(result, key=ENV_RUNNER_RESULTS, window=1)
        return result

    def evaluate_tasks(
        self,
        task_indices: list[int],
        env_config: dict[str, Any] | None = None,
        key: str = "main",
        *,
        greedy: bool = True,
        transcripts: bool = False,
    ) -> list[dict[str, Any]]:
        """Episodes on held-out tasks, spread over the env runners; one row per task.

        ``env_config``: env.config overrides of the evaluation envs (default: ``eval_env_config``);
        ``key`` names the set, so each runner keeps one set of envs per evaluation set;
        ``greedy``: greedy decoding (else sampled); ``transcripts``: rows carry the episode text.
        """
        group = self.env_runner_group
        kwargs = {"greedy": greedy, "transcripts": transcripts}
        if group.num_remote_workers() == 0:
            return group.local_env_runner.evaluate(task_indices, env_config, key, **kwargs)
        n = group.num_healthy_remote_workers()
        shards = [task_indices[i::n] for i in range(n)]
        results = group.foreach_env_runner(
            lambda runner: runner.evaluate(
                shards[(runner.worker_index - 1) % n], env_config, key, **kwargs
            ),
            local_env_runner=False,
        )
        return sorted((row for rows in results for row in rows), key=lambda r: r["task_index"])

    def evaluate_episodes(
        self,
        episodes: int,
        *,
        explore: bool = False,
        transcripts: str | Path | None = None,
        eval_set: str | None = None,
    ) -> dict[str, Any]:
        """``memrl eval`` of a MEM1 run: ``episodes`` tasks of the held-out set
        (``eval_env_config``, task_index 0, 1, ...), greedy unless ``explore``; ``eval_set``
        names one of ``eval_extra``'s sets instead (its env.config, tasks from its task_offset).

        Returns the means (``em``, ``f1``, ``peak_tokens``, ``turns``, ...) under ``summary``,
        per-task ``returns`` and ``turns``, and every per-task figure under ``per_task`` (lists
        in task order, so two evaluations compare task by task); writes one JSON line per
        episode (prompt, each turn's text and context size, outcome) to ``transcripts`` when
        given.
        """
        env_config, offset = None, 0
        if eval_set is not None:
            extra = self.config.mem1.eval_extra
            if eval_set not in extra:
                raise ValueError(
                    f"--eval-set {eval_set!r} is not one of this run's evaluation sets "
                    f"(algorithm.eval_extra: {', '.join(sorted(extra)) or 'none'}); leave it "
                    "out for the main one (algorithm.eval_env_config)."
                )
            env_config, offset = self.config.mem1.eval_sets()[f"{eval_set}_"]
        rows = self.evaluate_tasks(
            list(range(offset, offset + episodes)),
            env_config,
            key=f"memrl_eval_{eval_set or 'main'}",
            greedy=not explore,
            transcripts=True,
        )
        if transcripts is not None:
            path = Path(transcripts)
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("w", encoding="utf-8") as handle:
                for row in rows:
                    handle.write(json.dumps(row["transcript"]) + "\n")
        # Keys an episode's last step may lack (doc-QA reports answer_parts only for answers)
        # count as 0 for that task.
        numeric = sorted(
            {
                k
                for r in rows
                for k, v in r.items()
                if isinstance(v, int | float) and k != "task_index"
            }
        )
        per_task = {k: [float(r.get(k, 0.0)) for r in rows] for k in ["task_index", *numeric]}
        summary = {f"{k}_mean": float(np.mean(per_task[k])) for k in numeric}
        found = sum(per_task.get(VALUES_FOUND, []))
        if found:  # no search found an answer: no recall to report (and no NaN in the JSON)
            summary["state_recall"] = sum(per_task.get(VALUES_IN_STATE, [])) / found
        return {
            "summary": summary,
            "returns": [float(r["reward"]) for r in rows],
            "turns": [float(r["turns"]) for r in rows],
            "per_task": per_task,
            "transcripts": str(transcripts) if transcripts is not None else None,
        }


def merge_scores(parts: list[dict[str, np.ndarray]], shape: tuple[int, int]) -> dict[str, Any]:
    """The learners' ``score_rows`` shares as (B, T) arrays (each share names its ``rows``)."""
    out: dict[str, np.ndarray] = {}
    for part in parts:
        for key, value in part.items():
            if key != "rows":
                out.setdefault(key, np.zeros(shape, np.float32))[part["rows"]] = value
    return out


def learner_batches(sub: dict[str, np.ndarray], num_learners: int) -> dict[str, Any]:
    """``learner_group.update`` arguments for one minibatch of rows: all of it for a local
    learner (``num_learners`` 0 or 1); for L remote learners, one shard each with about equal
    tokens (a learner without rows gets one row with no loss tokens, as DDP and FSDP need every
    learner in every step)."""
    rows = sub["input_ids"].shape[0]
    if num_learners <= 1:
        return {"batch": MultiAgentBatch({DEFAULT_MODULE_ID: SampleBatch(sub)}, env_steps=rows)}
    batches = []
    for shard in shard_rows(row_lengths(sub), num_learners):
        part = slice_rows(sub, shard or [0])
        if not shard:
            part["loss_mask"] = np.zeros_like(part["loss_mask"])
        batch = MultiAgentBatch({DEFAULT_MODULE_ID: SampleBatch(part)}, env_steps=len(shard))
        batches.append(batch)
    return {"batches": batches}


def _first(results: Any) -> Any:
    """The first learner's return value of a ``foreach_learner`` call."""
    for item in results:
        return item.get()
    raise RuntimeError("no learner answered")
