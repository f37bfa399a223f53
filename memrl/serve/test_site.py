"""Serve the web-search test site (search results and articles for its QA tasks) on 127.0.0.1.

The site the web-search tests use, for trying ``memrl/WebSearchQA-v0`` offline: a results page at
``/search?q=...`` and the articles that answer ``LocalSite.tasks()``. It prints the env.config
keys that point the env at it (``search``, ``safety``, ``tasks``); configs/mem1_web_search_smol.yaml
uses the default port. It is served on uvicorn with the guards of ``memrl.envs.asgi``, like
``memrl serve retrieval`` and ``memrl serve webshop``.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--port", type=int, default=8765, help="port, 0 = any free (default: %(default)s)"
    )


def run(args: argparse.Namespace) -> int:
    import json
    import time

    from memrl.envs.web_search.testsite import LocalSite

    site = LocalSite(port=args.port)  # a port out of range or in use: one error line
    env_config = {
        "tasks": LocalSite.tasks(),
        "search": {"backend": "html", "options": site.search_options()},
        "safety": {"allow_hosts": ["127.0.0.1"], "allow_addresses": ["127.0.0.1"]},
    }
    print(f"test site: serving {site.url}/ (Ctrl-C to stop); env.config for it:", flush=True)
    print(json.dumps(env_config), flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        site.close()
    return 0
