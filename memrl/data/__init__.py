"""Commands of `memrl data NAME`: one module per command (see memrl/plugins.py)."""
