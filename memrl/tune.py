"""`memrl tune`: Ray Tune sweeps of an experiment config (search space from its `tune:` section)."""

from __future__ import annotations

import argparse


def run_tune(args: argparse.Namespace) -> int:
    """Runs a sweep; see the `tune:` section format in docs/tune.md."""
    raise NotImplementedError(
        "memrl tune is not available yet (it lands with the clusters-and-experiments work). "
        "Available now: memrl train CONFIG, memrl eval CHECKPOINT, memrl bench/serve/data NAME."
    )
