"""Experiment plumbing shared by every method: what `memrl train|tune|eval` run.

- ``config``: the experiment YAML as frozen, documented dataclasses (``settings`` maps dicts onto
  them with errors that name the key); the registries of algorithm and model settings;
- ``build``: an experiment as RLlib objects (env registration, the AlgorithmConfig);
- ``train``, ``evaluate``, ``tune`` (+ ``tune_space``): the run loops and their run directories;
- ``ray_session``: embedded or joined Ray; ``callbacks``: per-inner-episode metrics;
- ``loggers``: TensorBoard, Weights & Biases and MLflow (``run.loggers``);
- ``report``: tables, parquet and plots for training summaries and benchmarks;
- ``run_report`` (+ ``run_plots``, ``replay``, ``transcripts``): a run's HTML page with its
  curves, evaluation, replays of grid trials and transcripts of text agents;
- ``compare``: several runs and seeds on one plot; ``export``: a trained policy on its own.

May import: envs (to build and check them), ``memrl.metrics``, and a method only through the
registries in ``config`` (strings resolved when a config names them), so that the experiment code
knows no method by name. Never imports the CLI.
"""
