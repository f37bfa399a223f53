"""Commands of `memrl serve NAME`: one module per command (see memrl/plugins.py)."""
