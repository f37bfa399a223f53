"""The embedded Ray session: token auth without files in the home dir, in any process state."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memrl.ray_session import ray_session

pytestmark = pytest.mark.slow


def test_session_after_a_plain_ray_init_in_the_same_process(tmp_path, monkeypatch):
    """Ray caches the first token it loads; memrl's fresh token must still be the one used."""
    import ray

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    import shutil
    import tempfile

    temp = tempfile.mkdtemp(prefix="ray-plain-")  # not the shared /tmp/ray
    ray.init(num_cpus=1, include_dashboard=False, _temp_dir=temp)  # writes ~/.ray/auth_token
    ray.shutdown()
    shutil.rmtree(temp, ignore_errors=True)
    assert (Path(tmp_path) / ".ray" / "auth_token").is_file()
    mode_before = os.environ.get("RAY_AUTH_MODE")  # Ray's own init sets it for its process
    with ray_session(None, num_cpus=1) as info:
        assert info.embedded and info.cpus == 1
        assert os.environ["RAY_AUTH_MODE"] == "token"
        token = os.environ["RAY_AUTH_TOKEN"]
        assert token != (Path(tmp_path) / ".ray" / "auth_token").read_text().strip()
        assert ray.get(ray.remote(lambda: 41 + 1).remote()) == 42
        temp_dir = info.temp_dir
    assert not ray.is_initialized()
    assert "RAY_AUTH_TOKEN" not in os.environ  # the token lived as long as that Ray
    assert os.environ.get("RAY_AUTH_MODE") == mode_before
    assert temp_dir and not Path(temp_dir).exists()  # removed after a clean run


def test_a_failing_block_keeps_ray_logs(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(RuntimeError, match="boom"):
        with ray_session(None, num_cpus=1) as info:
            temp_dir = info.temp_dir
            raise RuntimeError("boom")
    assert Path(temp_dir).is_dir()  # kept for the post-mortem
    assert list(Path(tmp_path).iterdir()) == []  # nothing in the home dir
