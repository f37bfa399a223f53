"""Commands of `memrl bench NAME`: one module per command (see memrl/plugins.py)."""
