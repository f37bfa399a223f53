"""Serve WebShop as a web site (search, results, item pages, options, buy) over HTTP.

Browser agents (Selenium, Playwright, a person) shop at http://HOST:PORT/ : ``/`` starts a session
for a random goal of the split, ``/?goal=I`` for the I-th. The done page shows the reward, which
equals the text env's for the same choices (same engine). The port is bound before the catalogue
is built, so a port in use fails at once.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default: %(default)s)")
    parser.add_argument("--port", type=int, default=3000, help="port, 0 = any free (default: 3000)")
    parser.add_argument(
        "--data-dir",
        default=None,
        help="folder of WebShop files (default: a synthetic catalogue in memory)",
    )
    parser.add_argument(
        "--products",
        type=int,
        default=1000,
        help="synthetic size, or first N products of --data-dir",
    )
    parser.add_argument("--seed", type=int, default=0, help="catalogue seed (default: 0)")
    parser.add_argument(
        "--synthetic-goals",
        action="store_true",
        help="use synthetic goals instead of human instructions",
    )
    parser.add_argument(
        "--split",
        default="test",
        choices=["test", "eval", "train", "all"],
        help="goals to draw sessions from (default: %(default)s)",
    )
    parser.add_argument("--show-attrs", action="store_true", help="show the Attributes sub-page")


def run(args: argparse.Namespace) -> int:
    from memrl.envs.asgi import ASGIServer, bind
    from memrl.envs.webshop.engine import WebShopEngine
    from memrl.envs.webshop.site import WebShopApp, WebShopSite
    from memrl.envs.webshop.world import CatalogueSpec, get_world

    sock = bind(args.host, args.port)
    try:
        world = get_world(
            CatalogueSpec(
                data_dir=args.data_dir,
                num_products=args.products,
                seed=args.seed,
                human_goals=not args.synthetic_goals,
            )
        )
    except BaseException:
        sock.close()
        raise
    site = WebShopSite(
        WebShopEngine(world, show_attrs=args.show_attrs), world.split(args.split), seed=args.seed
    )
    server = ASGIServer(WebShopApp(site), sock, name="webshop-http")
    print(
        f"WebShop: {len(world.catalogue)} products, {len(site.goal_indices)} {args.split} goals;"
        f" serving {server.url}/ (Ctrl-C to stop)",
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0
