"""Experiment plumbing shared by every method: what `memrl train|tune|eval` run.

- ``config``: the experiment YAML as frozen, documented dataclasses (``settings`` maps dicts onto
  them with errors that name the key); the registries of algorithm and model settings;
- ``build``: an experiment as RLlib objects (env registration, the AlgorithmConfig);
- ``train``, ``evaluate``, ``tune`` (+ ``tune_space``): the run loops and their run directories;
- ``ray_session``: embedded or joined Ray; ``callbacks``: per-inner-episode metrics;
- ``report``: tables, parquet and plots for training summaries and benchmarks.

May import: envs (to build and check them), ``memrl.metrics``, and a method only through the
registries in ``config`` (strings resolved when a config names them), so that the experiment code
knows no method by name. Never imports the CLI.
"""
