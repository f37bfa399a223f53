"""MEM1: an LLM agent that rewrites a compact internal state each turn and forgets the rest.

By role (tests/test_import_rules.py enforces the imports):
- shared by rollout and training: ``prompts`` (prompt templates, tags from the env's text
  protocol), ``context`` (the one context builder: what the model sees each turn, and the
  training sequences built from the same turns);
- network (plain torch + transformers, no Ray): ``network`` (``TokenPolicy``: LM + LoRA + value
  head), ``generation/`` (backends: Hugging Face, vLLM, OpenAI-compatible), ``tiny`` (a local
  tokenizer and random Qwen2-shaped model for CPU runs and tests);
- RLModule: ``rlmodule`` (``LLMRLModule``, ``load_policy``);
- env-runner side: ``rollout`` (multi-turn rollout of a batch of text envs), ``env_runner``
  (``TextEnvRunner``), ``warm_start`` (scripted episodes for supervised warm start);
- learner side: ``batch`` (episodes -> packed token rows, micro-batches, learner shards),
  ``advantages`` (PPO returns and advantages, GRPO group scores), ``losses``, ``learner``
  (``TokenLearner``);
- ``algorithm`` (``Mem1Config``/``Mem1Algorithm``: sample, score, update, sync) and ``settings``
  (``model: {type: llm}``, ``algorithm: {name: mem1}``) join the two sides.
"""
