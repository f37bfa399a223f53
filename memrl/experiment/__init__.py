"""Experiment plumbing shared by every method: what `memrl train|tune|eval` run.

- ``config``: the experiment YAML as frozen, documented dataclasses (``dataclass_dicts`` maps dicts
  onto them with errors that name the key); the registries of algorithm and model settings;
- ``build``: an experiment as RLlib objects (env registration, the AlgorithmConfig);
- ``train`` (the loop), ``evaluate``, ``tune`` (+ ``tune_space``): what the commands run;
- ``run_dir``: a run directory and its checkpoints, the one owner of their file names and paths;
  ``progress``: metrics rows, the progress line, the summary; ``checkpoints``: building an
  Algorithm and restoring a checkpoint into it; ``checkpoint_check``: a checkpoint checked
  against the run's config, and the newest intact one picked (``state_files``: RLlib's state
  files read for names and shapes, without the weights); ``interrupts``: SIGTERM and lost
  learners (``learner_health``: whether the remote learners are alive);
- ``ray_session``: embedded or joined Ray; ``callbacks``: per-inner-episode metrics;
- ``loggers``: TensorBoard, Weights & Biases and MLflow (``run.loggers``);
- ``tables``: what every benchmark writes (a printed table, parquet, PNG);
- ``run_report`` (+ ``run_plots``, ``replay``, ``transcripts``): a run's HTML page with its
  curves, evaluation, replays of grid trials and transcripts of text agents;
- ``compare``: several runs and seeds on one plot; ``export``: a trained policy on its own.

May import: envs (to build and check them), ``memrl.metrics``, and a method only through the
registries in ``config`` (strings resolved when a config names them), so that the experiment code
knows no method by name. Never imports the CLI.
"""
