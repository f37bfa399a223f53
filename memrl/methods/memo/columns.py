"""Batch columns Memo adds to RLlib's (shared by its RLModule, env-runner and learner pieces)."""

MEMO_TRIAL_T = "memo_trial_t"
"""Batch column: the step index (0 = first step) of each row's observation within its trial."""

MEMO_FROZEN_FEATURES = "memo_frozen_features"
"""Extra model output / learner column: a frozen image encoder's features of each step's
observation (MemoRLModule with ``image_slice``), computed once on the env runner."""
