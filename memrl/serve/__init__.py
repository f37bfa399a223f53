"""Commands of `memrl serve NAME`: one module per command (see memrl/plugins.py).

Each starts a service that envs use (retrieval server, WebShop site) from the envs package; they
may import envs and ``memrl.experiment``, never a method or the CLI.
"""
