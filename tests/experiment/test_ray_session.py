"""The embedded Ray session: token auth without files in the home dir, in any process state."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memrl.experiment.ray_session import ray_session

pytestmark = pytest.mark.slow

# Run in a fresh interpreter: the scenario is about what one process's earlier Ray leaves behind.
PLAIN_INIT_THEN_SESSION = textwrap.dedent(
    """
    import os, shutil, tempfile
    from pathlib import Path
    import ray
    from memrl.experiment.ray_session import ray_session

    temp = tempfile.mkdtemp(prefix="ray-plain-")
    ray.init(num_cpus=1, include_dashboard=False, _temp_dir=temp)  # writes ~/.ray/auth_token
    ray.shutdown()
    shutil.rmtree(temp, ignore_errors=True)
    saved = (Path.home() / ".ray" / "auth_token").read_text().strip()
    mode_before = os.environ.get("RAY_AUTH_MODE")
    with ray_session(None, num_cpus=1) as info:
        assert info.embedded and info.cpus == 1
        assert os.environ["RAY_AUTH_MODE"] == "token"
        assert os.environ["RAY_AUTH_TOKEN"] != saved
        assert ray.get(ray.remote(lambda: 41 + 1).remote()) == 42
        temp_dir = info.temp_dir
    assert not ray.is_initialized()
    assert "RAY_AUTH_TOKEN" not in os.environ
    assert os.environ.get("RAY_AUTH_MODE") == mode_before
    assert temp_dir and not Path(temp_dir).exists()
    print("SESSION-OK")
    """
)


def _scenario(script: str, home: Path, marker: str) -> None:
    """Runs a scenario in a fresh interpreter with no RAY_AUTH_* variables and HOME=home."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env["HOME"] = str(home)
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0 and marker in out.stdout, out.stdout + out.stderr[-3000:]


def test_session_after_a_plain_ray_init_in_the_same_process(tmp_path):
    """Ray caches the first token it loads; memrl's fresh token must still be the one used."""
    _scenario(PLAIN_INIT_THEN_SESSION, tmp_path, "SESSION-OK")
    assert (tmp_path / ".ray" / "auth_token").is_file()  # Ray's own init wrote it; memrl did not


SESSION_THEN_PLAIN_INIT = textwrap.dedent(
    """
    import shutil, tempfile
    import ray
    from memrl.experiment.ray_session import ray_session

    with ray_session(None, num_cpus=1):
        assert ray.get(ray.remote(lambda: 1).remote()) == 1
    temp = tempfile.mkdtemp(prefix="ray-plain-")
    ray.init(num_cpus=1, include_dashboard=False, _temp_dir=temp)
    assert ray.get(ray.remote(lambda: 41 + 1).remote()) == 42
    ray.shutdown()
    shutil.rmtree(temp, ignore_errors=True)
    print("PLAIN-OK")
    """
)


def test_plain_ray_init_after_a_session_in_the_same_process(tmp_path):
    """The session's token must not outlive it in Ray's caches (it broke later plain inits)."""
    _scenario(SESSION_THEN_PLAIN_INIT, tmp_path, "PLAIN-OK")


def test_a_failing_block_keeps_ray_logs(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(RuntimeError, match="boom"):
        with ray_session(None, num_cpus=1) as info:
            temp_dir = info.temp_dir
            raise RuntimeError("boom")
    assert Path(temp_dir).is_dir()  # kept for the post-mortem
    assert list(Path(tmp_path).iterdir()) == []  # nothing in the home dir
    shutil.rmtree(temp_dir)


@pytest.mark.parametrize("error", [ValueError, TypeError, FileNotFoundError, KeyboardInterrupt])
def test_a_mistake_in_the_input_or_ctrl_c_leaves_no_ray_logs_behind(error):
    with pytest.raises(error, match="bad input"):
        with ray_session(None, num_cpus=1) as info:
            temp_dir = info.temp_dir
            raise error("bad input")
    assert not Path(temp_dir).exists()
