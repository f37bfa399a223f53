"""Scripted ObjNav-lite references: remembering the layout is worth SPL and successes per step."""

from __future__ import annotations

import json

import numpy as np
import pytest
from memrl_testing import memrl_cli

from memrl.envs.objnav import ObjNavConfig, ObjNavVec
from memrl.envs.objnav.agents import ObjNavAgents


def _run(kind: str, steps: int = 1500) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    vec = ObjNavVec(3, ObjNavConfig(seed=4, trial_len=steps))
    vec.reset()
    agent = ObjNavAgents(kind, vec)
    starts, success, spl = [], [], []
    for t in range(steps):
        r = vec.step(agent.act())
        for i in np.flatnonzero(r.episode_done):
            starts.append(t + 1 - r.episode_length[i])
            success.append(r.success[i])
            spl.append(r.spl[i])
    return np.array(starts), np.array(success), np.array(spl)


def test_the_explorer_with_memory_goes_straight_later_in_the_trial():
    starts, success, spl = _run("explore_memory")
    f_starts, f_success, f_spl = _run("explore_forget")
    late, f_late = starts >= 700, f_starts >= 700
    assert success.mean() > 0.95 and f_success.mean() > 0.8  # both find targets
    assert spl[late].mean() > 0.9  # the layout is known: shortest paths
    assert spl[late].mean() > 1.5 * f_spl[f_late].mean()
    assert late.sum() > 2 * f_late.sum()  # more inner episodes fit in the same steps
    assert abs(f_spl[f_starts < 700].mean() - f_spl[f_late].mean()) < 0.2  # no memory: flat


def test_oracle_is_the_ceiling():
    _, success, spl = _run("oracle", 600)
    assert success.all() and np.allclose(spl, 1.0)


def test_unknown_agent_lists_the_known_ones():
    vec = ObjNavVec(1, ObjNavConfig(seed=0))
    with pytest.raises(ValueError, match="explore_memory"):
        ObjNavAgents("frontier", vec)


def test_bench_reports_both_phases(tmp_path):
    out = memrl_cli(
        "bench",
        "objnav-refs",
        "--envs",
        "2",
        "--trial-len",
        "4000",
        "--early",
        "300",
        "--late",
        "600",
        "--agents",
        "explore_memory,explore_forget",
        "--json",
        "--output",
        str(tmp_path),
    )
    assert out.returncode == 0, out.stderr[-2000:]
    # A progress line per 4000 steps and agent, without --verbose: benchmarks run for minutes.
    assert "explore_forget: step 4000/4000" in out.stderr, out.stderr[-2000:]
    decoder = json.JSONDecoder()
    rows, end = decoder.raw_decode(out.stdout, out.stdout.index("["))
    by_index, _ = decoder.raw_decode(out.stdout, out.stdout.index("[", end))
    agents = ("explore_memory", "explore_forget")
    assert {(r["agent"], r["phase"]) for r in rows} == {
        (a, p) for a in agents for p in ("early", "late")
    }
    groups = ("ep0", "ep1-4", "ep5-19", "ep20+")
    assert [(r["agent"], r["group"]) for r in by_index] == [(a, g) for a in agents for g in groups]
    # Every inner episode is in one index group; the remembering explorer's first episode is
    # its only one without a map.
    for agent in agents:
        phases = [r for r in rows if r["agent"] == agent]
        groups_of = [r for r in by_index if r["agent"] == agent]
        assert sum(r["episodes"] for r in groups_of) >= max(r["episodes"] for r in phases)
        assert groups_of[0]["episodes"] == 2 and groups_of[1]["episodes"] <= 8  # 2 trials
    memory = {r["group"]: r for r in by_index if r["agent"] == "explore_memory"}
    forget = {r["group"]: r for r in by_index if r["agent"] == "explore_forget"}
    # The same explorer until its first episode ends; then the map it kept pays.
    assert memory["ep0"]["spl"] == forget["ep0"]["spl"]
    assert memory["ep5-19"]["spl"] > forget["ep5-19"]["spl"] + 0.3
    assert (tmp_path / "objnav-refs.png").is_file()
    assert (tmp_path / "objnav-refs-buckets.png").is_file()


def test_bench_takes_the_map_from_an_experiment_config(tmp_path):
    from argparse import Namespace

    from memrl.bench.objnav_refs import env_settings, run

    settings = env_settings("configs/objnav_memo.yaml")
    assert settings["grid_size"] == 12 and settings["num_categories"] == 6
    # --set applies to the config's values as in `memrl train`; without a config it is an error
    changed = env_settings("configs/objnav_memo.yaml", ["env.config.view_radius=2"])
    assert changed == {**settings, "view_radius": 2}
    with pytest.raises(ValueError, match="needs --config"):
        env_settings(None, ["env.config.view_radius=2"])
    wrong = Namespace(
        envs=1,
        trial_len=200,
        early=50,
        late=100,
        agents="oracle",
        buckets="0,1,5,20",
        seed=0,
        config="configs/memo_key_door.yaml",
        overrides=[],
        output=str(tmp_path),
        json=True,
    )
    with pytest.raises(ValueError, match="memrl/ObjNav-v0"):
        run(wrong)
    assert not any(tmp_path.iterdir())


def test_bench_set_without_a_config_is_a_usage_error(tmp_path):
    out = memrl_cli(
        "bench", "objnav-refs", "--set", "env.config.rooms=1", "--output", str(tmp_path)
    )
    assert out.returncode == 2, out.stderr[-2000:]
    assert "needs --config" in out.stderr and "Traceback" not in out.stderr
    assert not any(tmp_path.iterdir())
