"""RLlib callbacks shared by memrl's embodied runs: per-inner-episode metrics of a trial.

Envs that run several inner episodes in one trial (Dark-Key-To-Door, the memory corridor,
ObjNav-lite) report ``inner_episode_done`` / ``inner_episode_return`` / ``inner_episode_success``
in ``info``. At the trial's end these callbacks read them from the infos of the whole trial (the
final chunk and the earlier chunks RLlib passes as ``prev_episode_chunks``) and log the return of
inner episode k for the first ``MAX_INDEXED`` indices: an agent that remembers gets better after
its first inner episode. There is deliberately no per-step hook: RLlib calls ``on_episode_step``
for every env at every step, and the sampling loop is the hot path.
"""

from __future__ import annotations

from typing import Any

from ray.rllib.callbacks.callbacks import RLlibCallback

from memrl.rollout.trial_metrics import MAX_INDEXED, log_trial_inner_episodes


class InnerEpisodeMetrics(RLlibCallback):
    """Logs ``inner_return_<k>``, ``inner_success_rate`` and ``inner_episodes`` per trial, and,
    for a policy with a KV cache on the env runner (Memo, FCT, RMT), the most K/V tokens and
    bytes one env's cache held in each sampling round (``memory/kv_cache_tokens_peak``,
    ``memory/kv_cache_bytes_peak``)."""

    def on_sample_end(self, *, env_runner: Any = None, metrics_logger: Any = None, **kwargs: Any):
        keeper = getattr(getattr(env_runner, "module", None), "_keeper", None)
        if metrics_logger is None or keeper is None or not hasattr(keeper, "take_peak"):
            return
        tokens, nbytes = keeper.take_peak()
        if tokens:
            metrics_logger.log_value("memory/kv_cache_tokens_peak", tokens, reduce="max", window=1)
            metrics_logger.log_value("memory/kv_cache_bytes_peak", nbytes, reduce="max", window=1)

    def on_episode_end(
        self,
        *,
        episode: Any,
        metrics_logger: Any = None,
        prev_episode_chunks: list[Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if metrics_logger is None:
            return
        # Index 0 of a chunk's infos is its first observation's: the reset's, or the last step
        # of the previous chunk (a continuation chunk starts where that one ended).
        ends = [
            end
            for chunk in [*(prev_episode_chunks or []), episode]
            for end in _inner_episode_ends(chunk.get_infos()[1:])
        ]
        if not ends:
            return
        returns = [r for r, _ in ends]
        later = returns[MAX_INDEXED:]
        log_trial_inner_episodes(
            metrics_logger,
            returns[:MAX_INDEXED],
            sum(later) / len(later) if later else None,
            len(returns),
            sum(ok for _, ok in ends),
        )


def inner_episode_stats(episodes: list[Any]) -> dict[str, Any]:
    """The same statistics computed from finished episodes (used by `memrl eval`).

    Returns:
        ``inner_return_by_index`` (mean return of inner episode k over trials, as a list),
        ``inner_success_rate`` and ``inner_episodes_mean``; empty when the env reports none.
    """
    per_index: list[list[float]] = []
    successes: list[bool] = []
    counts = []
    for ep in episodes:
        ends = _inner_episode_ends(ep.get_infos())
        for n, (ret, ok) in enumerate(ends):
            if n >= len(per_index):
                per_index.append([])
            per_index[n].append(ret)
            successes.append(ok)
        counts.append(len(ends))
    if not successes:
        return {}
    return {
        "inner_return_by_index": [sum(v) / len(v) for v in per_index],
        "inner_success_rate": sum(successes) / len(successes),
        "inner_episodes_mean": sum(counts) / len(counts),
    }


def _inner_episode_ends(infos: Any) -> list[tuple[float, bool]]:
    """(return, success) of every inner episode that ends at one of these steps' infos."""
    return [
        (float(info.get("inner_episode_return", 0.0)), bool(info.get("inner_episode_success")))
        for info in infos
        if info and isinstance(info, dict) and info.get("inner_episode_done")
    ]
