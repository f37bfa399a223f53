"""The methods memrl trains: one folder (or module) per method, each with everything of its own.

- ``memo/``: the Memo summary-token transformer (and FCT, RMT, streaming modes) with PPO;
- ``mem1/``: the MEM1 LLM agent (context policies, generation, token-level PPO/GRPO);
- ``baselines``: RLlib's own MLP and LSTM policies as model settings;
- ``ppo``: the PPO algorithm settings the embodied methods share;
- ``ppo_math``: PPO's formulas (clipped surrogate, approx KL, masked mean), a leaf every method's
  learner uses and that imports no memrl code.

A method may import envs (the protocols they speak), ``memrl.metrics`` and ``ppo_math``; it never
imports another method, the experiment plumbing or the CLI. Inside a method, each file has one role:
networks import no Ray; the RLModule does not import the learner side; learner-side and
env-runner-side files do not import each other; only the method's ``settings`` (and MEM1's
``algorithm``) join them. tests/test_import_rules.py checks all of this.
"""
