"""MEM1 vs full context on multi-objective doc-QA: peak tokens, dependency, seconds, EM and F1.

One model (a local model directory, or ``scripted``: the scripted reference agent driven through the
same prompts, tokenizer and context policies) and one task set (the synthetic KB's test split), for
each number of objectives N and each context policy; every figure comes from the rollout loop and
memory metrics that training uses (memrl/methods/mem1/rollout.py, memrl/metrics.py).

    memrl bench mem1-context --model scripted --objectives 2 8 16 --tasks 16
    memrl bench mem1-context --model scripted --passage-words 0   # the KB's short passages
    memrl bench mem1-context --model scripted --multi-hop-fraction 0.5 1  # HotpotQA: all 2-hop
    memrl bench mem1-context --model runs/mem1_doc_qa_tiny/checkpoints/iter_000024

By default the observations follow the paper's setting: top-3 passages of 100 words each (MEM1
retrieves top-3 from the DPR wiki-2018 passages, 100 words each); ``--passage-words 0`` keeps the
synthetic KB's short passages (~24 words). The questions are half one-hop, half two-hop by default
(the env's default); ``--multi-hop-fraction 1`` makes every question two-hop, as in the
multi-objective HotpotQA tasks of the paper (HotpotQA questions need two supporting passages).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from typing import Any

from memrl.experiment.tables import Plot, add_output_arguments, write_report

logger = logging.getLogger(__name__)

NAME = "mem1_context"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        default="scripted",
        help="a model directory (HF format), a `memrl train` checkpoint, or 'scripted' "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--tokenizer",
        default=None,
        help="tokenizer directory for --model scripted (default: a BPE trained "
        "here on the env's text, one per --passage-words value)",
    )
    parser.add_argument(
        "--objectives",
        type=int,
        nargs="+",
        default=[2, 8, 16],
        help="numbers of questions per task (default: %(default)s)",
    )
    parser.add_argument(
        "--policies",
        nargs="+",
        default=["mem1", "full"],
        choices=["mem1", "full", "last_k"],
        help="context policies",
    )
    parser.add_argument("--tasks", type=int, default=16, help="test tasks per N")
    parser.add_argument("--synthetic-passages", type=int, default=300)
    parser.add_argument("--topk", type=int, default=3, help="passages per search (paper: 3)")
    parser.add_argument(
        "--passage-words",
        type=int,
        nargs="+",
        default=[100],
        help="synthetic passage length in words: 100 like the paper's Wikipedia passages, 0 for "
        "the KB's short ones (~24 words); several values give one set of rows each "
        "(default: %(default)s; ignored with --config, whose env.config decides)",
    )
    parser.add_argument(
        "--multi-hop-fraction",
        type=float,
        nargs="+",
        default=[0.5],
        help="share of two-hop questions: 1 like the paper's HotpotQA tasks (every question "
        "needs two searches); several values give one set of rows each (default: %(default)s; "
        "ignored with --config)",
    )
    parser.add_argument(
        "--config",
        default=None,
        help="an experiment YAML whose algorithm.prompt and env.config the model was trained "
        "with (objectives, split, max_turns, num_tasks and topk still come from this command)",
    )
    parser.add_argument(
        "--turns-per-objective",
        type=int,
        default=2,
        help="max_turns = this x N + 2 (the scripted agent needs up to 2 per two-hop question)",
    )
    parser.add_argument("--max-tokens-per-turn", type=int, default=256)
    parser.add_argument(
        "--compute-dtype",
        choices=["auto", "float32", "bfloat16"],
        default=None,
        help="dtype the model computes in (default: the --config's model.compute_dtype, else "
        "auto: bfloat16 on cuda, float32 on cpu)",
    )
    parser.add_argument("--batch", type=int, default=8, help="envs generating together")
    parser.add_argument("--seed", type=int, default=0)
    add_output_arguments(parser, NAME)


class ScriptedBackend:
    """The scripted doc-QA agent behind the generation interface (no model; log-probs 0).

    Each context starts with its task's prompt ids, which identify the episode; the agent reads the
    latest observation (the text after the context's last information tag) like a model would.
    """

    def __init__(self, tokenizer: Any, prompt: Any, max_turns: int) -> None:
        from memrl.envs.doc_qa.agent import ScriptedAgent

        self.tokenizer = tokenizer
        self.prompt = prompt
        self.max_turns = max_turns
        self._agent_cls = ScriptedAgent
        self._agents: dict[tuple[int, ...], Any] = {}

    def update_weights(self, lm: Any) -> None:
        """Nothing to update."""

    def begin(self, prompts: Sequence[Sequence[int]], questions: Sequence[list[str]]) -> None:
        """Registers the episodes about to run (their prompt ids and questions)."""
        self._agents = {}
        for ids, qs in zip(prompts, questions, strict=True):
            agent = self._agent_cls(self.prompt.text_tags())
            agent.reset("; ".join(qs), {"task": {"questions": qs}, "max_turns": self.max_turns})
            self._agents[tuple(ids)] = agent

    def generate(self, prompts, stops, max_new_tokens, *, greedy=False):
        from memrl.methods.mem1.generation.base import Generation

        out = []
        info_tag = f"<{self.prompt.tag('information')}>"
        for ctx in prompts:
            key = next(k for k in self._agents if tuple(ctx[: len(k)]) == k)
            tail = self.tokenizer.decode(list(ctx[len(key) :]))
            obs = tail[tail.rfind(info_tag) :] if info_tag in tail else None
            text = self._agents[key].act(obs)
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            out.append(Generation(ids=ids, logps=[0.0] * len(ids), text=text, finish_reason="stop"))
        return out


def _scripted_tokenizer(args: argparse.Namespace, prompt: Any, base_env: dict[str, Any]) -> Any:
    if args.tokenizer:
        from memrl.methods.mem1.network import load_tokenizer

        return load_tokenizer(args.tokenizer)
    from memrl.methods.mem1.tiny import build_tokenizer, env_texts

    texts = env_texts("memrl/DocQA-v0", base_env, prompt, 100)
    return build_tokenizer(texts, 2048, prompt.all_tag_strings())


def run(args: argparse.Namespace) -> int:
    import numpy as np
    import torch

    from memrl.envs import make_env
    from memrl.methods.mem1.context import ContextPolicy
    from memrl.methods.mem1.prompts import PromptSettings

    torch.set_num_threads(max(1, min(4, torch.get_num_threads())))
    prompt = PromptSettings()
    for fraction in args.multi_hop_fraction:
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"--multi-hop-fraction must lie in [0, 1], got {fraction}")
    settings: list[dict[str, Any]] = [
        {"synthetic_passages": args.synthetic_passages, "seed": args.seed,
         "synthetic_passage_words": words, "multi_hop_fraction": fraction}
        for words in args.passage_words
        for fraction in args.multi_hop_fraction
    ]  # fmt: skip
    if args.config:
        from memrl.experiment.config import load_config

        exp = load_config(args.config)
        prompt = exp.algorithm.prompt
        settings = [dict(exp.env.config)]
    lm = tokenizer = None
    compute = None
    if args.model != "scripted":
        from memrl.methods.mem1.network import resolve_compute_dtype

        configured = exp.model.compute_dtype if args.config else "auto"
        compute = resolve_compute_dtype(args.compute_dtype or configured)
        from memrl.experiment.run_dir import policy_module_dir
        from memrl.methods.mem1.generation import GenerationSettings, make_backend
        from memrl.methods.mem1.rlmodule import load_policy

        lm, tokenizer = load_policy(args.model, policy_module_dir(args.model))
        if torch.cuda.is_available():
            lm = lm.to("cuda")
        lm.eval()
    rows = []
    for base_env in settings:
        if lm is None:
            tokenizer = _scripted_tokenizer(args, prompt, base_env)
        words = int(base_env.get("synthetic_passage_words", 0))
        hops = float(base_env.get("multi_hop_fraction", 0.5))
        setting = (f"{words} words" if words else "short") + (
            "" if hops == 0.5 else f", {hops:g} two-hop"
        )
        for n in args.objectives:
            max_turns = args.turns_per_objective * n + 2
            config = {
                **base_env,
                "objectives": n,
                "split": "test",
                "max_turns": max_turns,
                "num_tasks": max(args.tasks, 1),
                "topk": args.topk,
            }
            envs = [make_env("memrl/DocQA-v0", config) for _ in range(args.batch)]
            for name in args.policies:
                policy = ContextPolicy(name, k=1)
                if lm is None:
                    backend = ScriptedBackend(tokenizer, prompt, max_turns)
                else:
                    backend = make_backend(
                        GenerationSettings(backend="hf", seed=args.seed),
                        lm,
                        tokenizer,
                        compute_dtype=compute,
                    )
                episodes = _episodes(args, envs, backend, tokenizer, policy, prompt)
                mem = [ep.memory_metrics() for ep in episodes]
                obs = [len(t.obs_ids) for ep in episodes for t in ep.turns if t.obs_ids]
                gen = [len(t.gen_ids) for ep in episodes for t in ep.turns]
                rows.append(
                    {
                        "model": "scripted" if lm is None else args.model,
                        "policy": name,
                        "series": f"{name}, {setting}",
                        "setting": setting,
                        "objectives": n,
                        "topk": args.topk,
                        "passage_words": words,
                        "multi_hop_fraction": hops,
                        "obs_tokens": float(np.mean(obs)) if obs else 0.0,
                        "gen_tokens": float(np.mean(gen)) if gen else 0.0,
                        "tasks": len(episodes),
                        "peak_tokens": float(np.mean([m["peak_tokens"] for m in mem])),
                        "dependency": float(np.mean([m["dependency"] for m in mem])),
                        "seconds": float(np.mean([ep.seconds for ep in episodes])),
                        "em": float(np.mean([ep.info.get("em", 0.0) for ep in episodes])),
                        "em_se": float(
                            np.std([ep.info.get("em", 0.0) for ep in episodes])
                            / np.sqrt(max(1, len(episodes) - 1))
                        ),
                        "f1": float(np.mean([ep.info.get("f1", 0.0) for ep in episodes])),
                        "turns": float(np.mean([len(ep) for ep in episodes])),
                    }
                )
                logger.info("N=%d %s: %s", n, name, rows[-1])
            for env in envs:
                env.close()
    title = _ratios(rows)
    write_report(
        NAME,
        rows,
        args.output,
        as_json=args.json,
        title=title,
        columns=[
            "model",
            "policy",
            "series",
            "objectives",
            "topk",
            "passage_words",
            "multi_hop_fraction",
            "tasks",
            "obs_tokens",
            "gen_tokens",
            "peak_tokens",
            "dependency",
            "seconds",
            "em",
            "em_se",
            "f1",
            "turns",
        ],
        plots=[
            Plot(x="objectives", y="peak_tokens", group="series", logy=True),
            Plot(x="objectives", y="dependency", group="series", logy=True),
            Plot(x="objectives", y="seconds", group="series"),
            Plot(x="objectives", y="em", group="series"),
        ],
    )
    return 0


def _episodes(
    args: argparse.Namespace,
    envs: list[Any],
    backend: Any,
    tokenizer: Any,
    policy: Any,
    prompt: Any,
) -> list[Any]:
    """Greedy episodes on test tasks 0..args.tasks-1, ``len(envs)`` at a time."""
    from memrl.methods.mem1.prompts import render_prompt
    from memrl.methods.mem1.rollout import rollout

    episodes = []
    for start in range(0, args.tasks, len(envs)):
        idx = list(range(start, min(args.tasks, start + len(envs))))
        batch_envs = envs[: len(idx)]
        if isinstance(backend, ScriptedBackend):
            # The scripted agent plans from each task's questions, read off a reset of its env.
            prompts, questions = [], []
            for env, i in zip(batch_envs, idx, strict=True):
                obs, info = env.reset(options={"task_index": i})
                text = render_prompt(prompt, obs, tokenizer)
                prompts.append(tokenizer.encode(text, add_special_tokens=False))
                questions.append(info["task"]["questions"])
            backend.begin(prompts, questions)
        episodes += rollout(
            batch_envs,
            backend,
            tokenizer,
            policy=policy,
            prompt=prompt,
            max_tokens_per_turn=args.max_tokens_per_turn,
            reset_options=[{"task_index": i} for i in idx],
            greedy=True,
        )
    return episodes


def _ratios(rows: list[dict[str, Any]]) -> str:
    """A title with mem1/full ratios of peak tokens and dependency per setting and N."""
    by = {(r["setting"], r["policy"], r["objectives"]): r for r in rows}
    order = list(dict.fromkeys(r["setting"] for r in rows))
    parts = []
    for (setting, policy, n), r in sorted(
        by.items(), key=lambda kv: (order.index(kv[0][0]), kv[0][2])
    ):
        full = by.get((setting, "full", n))
        if policy == "mem1" and full and full["peak_tokens"] and full["dependency"]:
            parts.append(
                f"{setting}/N={n}: peak {r['peak_tokens'] / full['peak_tokens']:.3f}, "
                f"dependency {r['dependency'] / full['dependency']:.3f}"
            )
    return "MEM1 vs full context (mem1/full: " + "; ".join(parts) + ")" if parts else NAME
