"""The worker-process adapter (memrl/Habitat-v0), end to end through the ObjNav-lite backend.

Every test here starts a real second process and talks to it over the real socket protocol; the
faults are real too (SIGKILL, SIGSTOP, an interpreter without numpy).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from memrl.envs import make_env
from memrl.envs.habitat import (
    PYTHON_ENV_VAR,
    HabitatEnv,
    WorkerCrashedError,
    WorkerError,
    resolve_python,
    wire,
)
from memrl.envs.habitat.client import WorkerProcess
from memrl.envs.habitat.env import build_space
from memrl.envs.objnav import ObjNavEnv

TASK = {"seed": 4, "trial_len": 80}


@pytest.fixture
def env():
    env = HabitatEnv(backend="objnav", task=TASK, render_mode="rgb_array", step_timeout_s=30)
    yield env
    env.close()


def test_import_does_not_import_habitat():
    code = "import sys, memrl.envs.habitat; assert 'habitat' not in sys.modules; print('ok')"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[3],
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_worker_process_mirrors_the_in_process_env(env):
    assert env.worker_pid is not None and env.worker_pid != os.getpid()
    local = ObjNavEnv(**TASK)
    assert env.observation_space == local.observation_space
    assert env.action_space == local.action_space
    obs, info = env.reset(seed=5)
    ref, ref_info = local.reset(seed=5)
    assert np.array_equal(obs, ref) and obs.dtype == np.float32
    assert info["worker_restarts"] == 0 and info["target"] == ref_info["target"]
    rng = np.random.default_rng(0)
    for _ in range(80):
        action = int(rng.integers(0, 4))
        got, want = env.step(action), local.step(action)
        assert np.array_equal(got[0], want[0])
        assert got[1:4] == pytest.approx(want[1:4])
        assert got[4] == pytest.approx(want[4])
    assert got[3] is True and "trial_success_rate" in got[4]  # the trial ended at trial_len
    frame = env.render()
    assert frame.dtype == np.uint8 and frame.shape[2] == 3


def test_make_env_builds_it_from_a_config():
    env = make_env(
        "memrl/Habitat-v0", {"backend": "objnav", "task": {"grid_size": 16, "num_categories": 5}}
    )
    try:
        obs, _ = env.reset(seed=0)
        assert obs.shape == env.observation_space.shape == (4 * 9 * 7 + 5 + 10,)
    finally:
        env.close()


def test_worker_killed_gives_clear_error_then_restarts(env):
    env.reset(seed=1)
    env.step(1)
    old = env.worker_pid
    os.kill(old, signal.SIGKILL)
    with pytest.raises(WorkerCrashedError, match=r"SIGKILL.*during step") as err:
        env.step(1)
    assert "next reset()" in str(err.value) and str(old) in str(err.value)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(1)
    obs, info = env.reset(seed=1)
    assert env.worker_pid not in (None, old)
    assert info["worker_restarts"] == env.restarts == 1
    assert env.observation_space.contains(obs)
    env.step(1)


def test_worker_exits_when_its_client_goes_away():
    worker = WorkerProcess(sys.executable, "objnav", TASK, None, 60.0, 30.0)
    worker._sock.close()  # the memrl process is gone: its end of the socketpair closes
    assert worker.proc.wait(timeout=30) == 0
    worker.close()


def test_hung_worker_times_out_and_is_replaced():
    env = HabitatEnv(backend="objnav", task=TASK, step_timeout_s=1.0)
    try:
        env.reset(seed=0)
        pid = env.worker_pid
        os.kill(pid, signal.SIGSTOP)
        with pytest.raises(WorkerCrashedError, match="did not answer within 1 s"):
            env.step(2)
        env.reset(seed=0)
        assert env.worker_pid != pid
        env.step(2)
    finally:
        env.close()


def test_error_inside_worker_is_reported_and_worker_lives(env):
    env.reset(seed=0)
    pid = env.worker_pid
    with pytest.raises(WorkerError, match="ValueError in the env worker: ObjNav action") as err:
        env.step(9)
    assert "worker traceback" in str(err.value) and "Traceback" in err.value.remote_traceback
    assert env.worker_pid == pid
    env.step(0)


def test_bad_task_config_fails_at_construction_with_worker_message():
    with pytest.raises(WorkerError, match="Unknown ObjNav config keys"):
        HabitatEnv(backend="objnav", task={"grid": 3})


def test_interpreter_without_numpy_fails_to_start_with_its_log(tmp_path):
    venv = tmp_path / "bare"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    python = venv / "bin" / "python"
    with pytest.raises(WorkerCrashedError, match=r"(?s)exited with code 1 during start.*numpy"):
        HabitatEnv(backend="objnav", python=str(python), start_timeout_s=60)


def test_interpreter_resolution(monkeypatch, tmp_path):
    monkeypatch.delenv(PYTHON_ENV_VAR, raising=False)
    with pytest.raises(ValueError, match=PYTHON_ENV_VAR):
        resolve_python("habitat", None)
    assert resolve_python("objnav", None) == sys.executable
    monkeypatch.setenv(PYTHON_ENV_VAR, str(tmp_path / "missing" / "python"))
    with pytest.raises(FileNotFoundError, match=PYTHON_ENV_VAR):
        resolve_python("habitat", None)
    with pytest.raises(FileNotFoundError, match="env.config.python"):
        HabitatEnv(backend="objnav", python=str(tmp_path))
    with pytest.raises(ValueError, match="backend"):
        HabitatEnv(backend="mujoco")


def test_wire_round_trip_and_bad_frames():
    a, b = socket.socketpair()
    try:
        arrays = {
            "obs/rgb": np.arange(24, dtype=np.uint8).reshape(2, 4, 3),
            "obs/gps": np.array([0.5, -1.0, 0.0, 1.0], dtype=np.float32),
            "empty": np.zeros((0, 3), dtype=np.int64),
            "scalar": np.array(7, np.int16),
        }
        wire.send(a, {"op": "x", "value": np.float32(1.5), "info": {"n": np.int64(3)}}, arrays)
        header, got = wire.recv(b)
        assert header == {"op": "x", "value": 1.5, "info": {"n": 3}}
        for k, v in arrays.items():
            assert got[k].dtype == v.dtype and np.array_equal(got[k], v)
        assert set(wire.arrays_to_obs(got)) == {"rgb", "gps"}
        a.sendall(b"JUNK\x00\x00\x00\x01{")
        with pytest.raises(wire.ProtocolError, match="magic"):
            wire.recv(b)
        a.close()
        with pytest.raises(wire.PeerClosed):
            wire.recv(b)
    finally:
        b.close()


def test_space_descriptions_round_trip():
    space = gym.spaces.Dict(
        {
            "rgb": gym.spaces.Box(0, 255, (8, 6, 3), np.uint8),
            "objectgoal": gym.spaces.Box(0.0, 1.0, (20,), np.float32),
            "gps": gym.spaces.Box(np.array([-1, -2, -1, -1], np.float32), np.float32(1), (4,)),
        }
    )
    assert build_space(wire.describe_space(space)) == space
    assert build_space(wire.describe_space(gym.spaces.Discrete(6))) == gym.spaces.Discrete(6)
    with pytest.raises(TypeError, match="MultiBinary"):
        wire.describe_space(gym.spaces.MultiBinary(3))


@pytest.mark.habitat
def test_real_habitat_worker():
    python = os.environ.get(PYTHON_ENV_VAR)
    if not python:
        pytest.skip(
            f"{PYTHON_ENV_VAR} is not set: point it at a habitat env's python "
            "(docs/habitat.md) to run the real habitat-sim test"
        )
    task = {"trial_len": 40, "episode_len": 20, "seed": 0}
    if os.environ.get("MEMRL_HABITAT_CONFIG"):
        task["config_path"] = os.environ["MEMRL_HABITAT_CONFIG"]
    env = HabitatEnv(backend="habitat", task=task, step_timeout_s=300)
    try:
        assert set(env.observation_space.spaces) == {"rgb", "objectgoal", "gps"}
        assert env.action_space.n == 6
        obs, info = env.reset(seed=0)
        assert env.observation_space["rgb"].contains(obs["rgb"])
        assert obs["objectgoal"].sum() == 1.0
        assert np.allclose(obs["gps"], [0, 0, 0, 1], atol=1e-4)
        for t in range(39):
            action = 0 if t == 10 else (1 if t % 5 else 3)
            obs, reward, terminated, truncated, info = env.step(action)
            assert not terminated and not truncated and np.isfinite(reward)
            assert env.observation_space.contains(obs)
            if action == 0:  # STOP ends the inner episode; the next starts in the same scene
                assert info["inner_episode_done"] and 0.0 <= info["inner_episode_spl"] <= 1.0
        assert env.step(1)[3]  # truncated: the trial ends at trial_len
        env.reset(seed=1)
        os.kill(env.worker_pid, signal.SIGKILL)
        with pytest.raises(WorkerCrashedError):
            env.step(1)
        env.reset(seed=1)
        assert env.restarts == 1
    finally:
        env.close()
