"""The slim core works without any extra, and a feature whose extra is missing says which one."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from memrl_testing import REPO

from memrl.extras import EXTRA_OF_MODULE, missing_extra, require

WITHOUT_EXTRAS = """
import importlib.abc, io, json, sys, contextlib
blocked = set(sys.argv[1].split(","))

class Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Missing())
from memrl.cli import main
from memrl.experiment.build import build_algorithm_config, validate_env
from memrl.experiment.config import load_config

out = {}
exp = load_config("configs/quickstart.yaml")
validate_env(exp)
out["quickstart"] = type(build_algorithm_config(exp)).__name__
err = io.StringIO()
with contextlib.redirect_stderr(err):
    out["mem1_code"] = main(["train", "configs/mem1_doc_qa_tiny.yaml", "--output", sys.argv[2]])
out["mem1_err"] = err.getvalue()
out["imported"] = sorted(m for m in sys.modules if m.split(".")[0] in blocked)
print(json.dumps(out))
"""


@pytest.mark.slow
def test_core_trains_memo_without_extras_and_names_the_missing_extra(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_EXTRAS, ",".join(EXTRA_OF_MODULE), str(tmp_path / "r")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["quickstart"] == "PPOConfig" and out["imported"] == []
    assert out["mem1_code"] == 2
    assert out["mem1_err"].startswith("error: ") and "extra (pip install 'memrl[" in out["mem1_err"]
    assert not (tmp_path / "r" / "metrics.parquet").exists()


def test_missing_extra_messages():
    err = ModuleNotFoundError("No module named 'bm25s'", name="bm25s")
    assert missing_extra(err) == (
        "bm25s is not installed: it comes with the 'web' extra (pip install 'memrl[web]')"
    )
    assert missing_extra(ModuleNotFoundError("x", name="numpy")) is None
    with pytest.raises(ImportError, match=r"run.loggers: nope needs nope_pkg"):
        EXTRA_OF_MODULE["nope_pkg"] = "loggers"
        try:
            require("nope_pkg", "run.loggers: nope")
        finally:
            del EXTRA_OF_MODULE["nope_pkg"]
