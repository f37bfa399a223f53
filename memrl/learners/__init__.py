"""RLlib Learners, algorithm settings and pure loss functions."""
