"""Serve a corpus over the Search-R1/MEM1 retrieval protocol (POST /retrieve, GET /health).

Examples:
    memrl serve retrieval --synthetic 100000 --port 8000
    memrl serve retrieval --corpus data/wiki18.parquet --index data/wiki18-bm25 --host 0.0.0.0
    memrl serve retrieval --index data/syn100k-bm25        # corpus path read from the index

Point envs at it with DocQAEnv(retriever="http", retrieval_url="http://127.0.0.1:8000"), or any
Search-R1/MEM1 client at http://HOST:PORT/retrieve. --port 0 picks a free port (printed). The port
is bound before the index is built, so a port in use fails at once. On a Ray cluster, the same
service runs as a Ray Serve application:
    serve run memrl.envs.retrieval.serve_app:app_builder synthetic_passages=100000
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--corpus", metavar="PATH", help="corpus file (parquet or jsonl)")
    parser.add_argument("--synthetic", type=int, metavar="N", help="synthetic KB of N passages")
    parser.add_argument("--index", metavar="DIR", help="saved index folder (else built in memory)")
    parser.add_argument(
        "--kind",
        default="bm25",
        choices=["bm25", "dense"],
        help="index built in memory when --index is absent (default bm25)",
    )
    parser.add_argument("--seed", type=int, default=0, help="synthetic KB seed (default 0)")
    parser.add_argument("--host", default="127.0.0.1", help="interface (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="TCP port; 0 = any free port")


def build(args: argparse.Namespace):
    """The retriever the command serves, from its arguments."""
    from memrl.envs.doc_qa import resources
    from memrl.envs.retrieval.bm25 import read_index_meta

    if args.synthetic is not None and (args.corpus or args.index):
        raise ValueError("Pass either --synthetic N or --corpus/--index, not both.")
    if args.synthetic is not None:
        if args.kind != "bm25":
            from memrl.envs.retrieval.local import LocalRetriever, build_index

            corpus = resources.synthetic_kb(args.synthetic, args.seed).corpus
            return LocalRetriever(corpus, build_index(corpus, args.kind))
        return resources.synthetic_retriever(args.synthetic, args.seed, show_progress=True)
    corpus = args.corpus
    if corpus is None and args.index:
        corpus = read_index_meta(args.index).get("corpus")
    if corpus is None:
        raise ValueError(
            "Nothing to serve: pass --synthetic N, --corpus PATH, or --index DIR built by "
            "`memrl data index`."
        )
    return resources.local_retriever(corpus, args.index, args.kind)


def run(args: argparse.Namespace) -> int:
    from memrl.envs.asgi import bind
    from memrl.envs.retrieval.app import RetrievalServer

    sock = bind(args.host, args.port)
    try:
        retriever = build(args)
    except BaseException:
        sock.close()
        raise
    server = RetrievalServer(retriever, num_docs=len(retriever.corpus), sock=sock)
    print(
        f"serving {len(retriever.corpus)} passages on {server.url} (POST /retrieve); Ctrl-C stops",
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0
