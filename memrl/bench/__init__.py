"""Commands of `memrl bench NAME`: one module per command (see memrl/plugins.py).

A benchmark prints a table and writes parquet + PNG (``memrl.experiment.tables``). Commands may
import anything in memrl except the CLI; each imports its heavy dependencies inside ``run``.
"""
