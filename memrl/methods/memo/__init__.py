"""Memo: a transformer policy that writes summary tokens and keeps only those plus its segment.

By role (tests/test_import_rules.py enforces the imports):
- network (plain torch, no Ray): ``layers`` (config, norms, RoPE, attention/MLP parameters),
  ``cache`` (per-env KV cache), ``network`` (``MemoTransformer``: training forward, cached step,
  prefill), ``frozen_encoder`` (fixed conv encoder for image observations), ``value_head``
  (the critic's PopArt-normalized output layer); ``columns``: batch column names;
- RLModule: ``rlmodule`` (``MemoRLModule``: encoder + transformer + heads);
- env-runner side: ``cache_keeper`` (one KV cache per vector-env slot, KV refresh on new
  weights), ``connectors`` (each row's step within its trial);
- learner side: ``batch`` (whole-trial rows, GAE), ``learner`` (``MemoPPOLearner``);
- ``settings``: ``model: {type: memo}``, the one place that wires these into an AlgorithmConfig.
"""
