"""Batch columns Memo adds to RLlib's (shared by its RLModule, env-runner and learner pieces)."""

MEMO_TRIAL_T = "memo_trial_t"
"""Batch column: the step index (0 = first step) of each row's observation within its trial."""

MEMO_FROZEN_FEATURES = "memo_frozen_features"
"""Extra model output / learner column: a frozen image encoder's features of each step's
observation (MemoRLModule with ``image_slice``), computed once on the env runner."""

MEMO_SEG_LEN = "memo_seg_len"
"""Extra model output / learner column: the segment length a step was acted with (randomized per
weight sync with ``seg_randomization``); the learner's loss pass uses the same one."""

VF_PREDS = "memo_vf_preds"
"""Forward-train output: the critic's values (B, T) in its normalized units."""

MEMO_PREFIX_OBS = "memo_prefix_obs"
"""Bulk rollout extra: (N, P, *obs_shape) each env's trial observations before the rollout's first
row (env n's first ``trial_t[0, n]`` entries), the context of rows that start mid-trial."""

BEHAVIOUR_WEIGHTS = "memo_behaviour_weights"
"""Learner column of a batch acted behind: pi_prox(a) / pi_behaviour(a) per step, the importance
weight of decoupled PPO's surrogate (pi_prox: the learner's policy before the update)."""
