"""Doc-QA env benchmark: env steps/s and the scripted agent's success with no model in the loop.

For each corpus size and number of objectives it builds ``memrl/DocQA-v0`` on the synthetic KB
(BM25, in-process by default, or over HTTP with ``--http``), plays episodes with the scripted
reference agent and reports env steps/s (resets and the agent's own time included, both tiny),
reset time, mean turns, mean summed EM and the share of tasks solved completely.

Example:
    memrl bench docqa --sizes 1000 100000 --objectives 1 2 4 --episodes 300
"""

from __future__ import annotations

import argparse

from memrl.experiment.tables import add_output_arguments

NAME = "docqa"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000], help="KB sizes"
    )
    parser.add_argument(
        "--objectives", type=int, nargs="+", default=[1, 2, 4], help="questions per task"
    )
    parser.add_argument("--episodes", type=int, default=300, help="episodes per configuration")
    parser.add_argument("--split", default="test", choices=["train", "test"], help="task split")
    parser.add_argument(
        "--http", action="store_true", help="also run through memrl's HTTP server on 127.0.0.1"
    )
    add_output_arguments(parser, NAME)


def run(args: argparse.Namespace) -> int:
    import logging
    import time

    from memrl.envs.doc_qa import DocQAEnv, resources
    from memrl.envs.doc_qa.agent import ScriptedAgent, run_episode
    from memrl.envs.retrieval.app import RetrievalServer
    from memrl.experiment.tables import Plot, write_report

    logging.getLogger("bm25s").setLevel(logging.WARNING)
    rows = []
    for size in args.sizes:
        start = time.perf_counter()
        local = resources.synthetic_retriever(size, 0)
        setup_s = time.perf_counter() - start
        paths = [("in-process", None)]
        server = None
        if args.http:
            server = RetrievalServer(local, "127.0.0.1", 0, num_docs=size).start()
            paths.append(("http", server.url))
        for retriever, url in paths:
            for objectives in args.objectives:
                max_turns = 2 * objectives + 2  # every hop of every question, plus the answer
                extra = {"retriever": "http", "retrieval_url": url} if url else {}
                env = DocQAEnv(
                    synthetic_passages=size,
                    objectives=objectives,
                    split=args.split,
                    max_turns=max_turns,
                    num_tasks=args.episodes,
                    **extra,
                )
                agent = ScriptedAgent(env.tags)
                start = time.perf_counter()
                for i in range(args.episodes):
                    env.reset(options={"task_index": i})
                reset_s = (time.perf_counter() - start) / args.episodes
                steps, ems, solved = 0, 0.0, 0
                start = time.perf_counter()
                for i in range(args.episodes):
                    result = run_episode(env, agent, options={"task_index": i})
                    steps += result["turns"]
                    ems += result["em"]
                    solved += result["em"] == objectives
                elapsed = time.perf_counter() - start
                rows.append(
                    {
                        "passages": size,
                        "retriever": retriever,
                        "objectives": objectives,
                        "max_turns": max_turns,
                        "episodes": args.episodes,
                        "steps_per_s": steps / elapsed,
                        "episodes_per_s": args.episodes / elapsed,
                        "mean_turns": steps / args.episodes,
                        "mean_em": ems / args.episodes,
                        "solved": solved / args.episodes,
                        "reset_ms": 1000 * reset_s,
                        "kb_index_setup_s": setup_s,
                    }
                )
        if server is not None:
            server.stop()
    write_report(
        NAME,
        rows,
        args.output,
        plots=[
            Plot(x="passages", y="steps_per_s", group="objectives", facet="retriever", logx=True),
            Plot(x="objectives", y="solved", group="passages", facet="retriever"),
        ],
        as_json=args.json,
        title="memrl/DocQA-v0 with the scripted agent (synthetic KB, BM25 top-3)",
    )
    return 0
