"""Commands of `memrl data NAME`: one module per command (see memrl/plugins.py).

Each builds files envs read (corpora, indexes, task sets, catalogues) with the envs package's own
builders; they may import envs, never a method or the CLI.
"""
