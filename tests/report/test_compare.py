"""`memrl compare`: runs and seeds on one plot, mean and spread per label, equal-step table."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml
from memrl_testing import memrl_cli

from memrl.experiment.compare import compare_runs, default_label, model_label


def _run(
    root, folder, model, slope, iterations=10, steps_per_iter=1000, name=None, seed=0, env=None
):
    """A run directory whose config is named ``name`` (default: the folder)."""
    run = root / folder
    run.mkdir(parents=True)
    config = {"name": name or folder, "model": model, "run": {"seed": seed}}
    if env is not None:
        config["env"] = {"id": env}
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    rows = [
        {
            "training_iteration": i,
            "env_steps_sampled": steps_per_iter * i,
            # constant for 15 iterations or fewer: the moving average (window 1) keeps it exact
            "episode_return_mean": slope * steps_per_iter * i,
        }
        for i in range(1, iterations + 1)
    ]
    pd.DataFrame(rows).to_parquet(run / "metrics.parquet")
    return run


def test_mean_and_spread_at_equal_steps(tmp_path, capsys):
    runs = [
        _run(tmp_path, "memo_s0", {"type": "memo", "mode": "memo"}, 0.001, name="memo"),
        _run(tmp_path, "memo_s1", {"type": "memo", "mode": "memo"}, 0.003, name="memo", seed=1),
        # the shortest: 8000 steps
        _run(tmp_path, "mlp_s0", {"type": "mlp"}, 0.0005, iterations=8, name="mlp"),
    ]
    out = compare_runs(runs, output=tmp_path / "cmp", points=2)
    rows = {r["label"]: r for r in out["rows"]}
    assert set(rows) == {"memo", "mlp"} and rows["memo"]["runs"] == 2
    assert out["warnings"] == []  # the two memo runs differ only in their seed
    # Equal steps up to what every run reached: 4000 and 8000.
    assert rows["memo"]["at 4,000 steps"] == pytest.approx((4 + 12) / 2)
    assert rows["memo"]["at 4,000 steps (std)"] == pytest.approx(4.0)
    assert rows["memo"]["at 8,000 steps"] == pytest.approx((8 + 24) / 2)
    assert rows["mlp"]["at 8,000 steps"] == pytest.approx(4.0)
    table = pd.read_parquet(tmp_path / "cmp" / "compare.parquet")
    assert table.loc[table["label"] == "memo", "at 8,000 steps"].item() == pytest.approx(16.0)
    curves = pd.read_parquet(out["curves"])
    assert set(curves["run"]) == {str(r) for r in runs} and curves["env_steps"].max() == 8000
    assert (tmp_path / "cmp" / "compare.png").stat().st_size > 10_000
    assert "| memo | 2 | 8 | 4 | 16 | 8 |" in capsys.readouterr().out


def test_labels_group_seeds_and_must_match_runs(tmp_path):
    runs = [_run(tmp_path, f"r{i}", {"type": "mlp"}, 0.001 * (i + 1)) for i in range(3)]
    out = compare_runs(runs, ["a", "b", "a"], output=tmp_path / "cmp", points=1)
    assert [(r["label"], r["runs"]) for r in out["rows"]] == [("a", 2), ("b", 1)]
    with pytest.raises(ValueError, match="got 2 --label for 3 runs"):
        compare_runs(runs, ["a", "b"], output=tmp_path / "cmp")
    with pytest.raises(ValueError, match="has no values of 'nope'"):
        compare_runs(runs, metric="nope", output=tmp_path / "cmp")


def test_default_labels():
    assert model_label({"model": {"type": "memo", "mode": "rmt"}}) == "rmt"
    assert model_label({"model": {"type": "lstm"}}) == "lstm"
    llm = {"model": {"type": "llm"}, "algorithm": {"name": "mem1", "context_policy": "full"}}
    assert model_label(llm) == "mem1 (full context)"
    assert default_label({"name": "memo_key_door", "model": {"type": "memo"}}) == "memo_key_door"
    unnamed = {"env": {"id": "memrl/DarkKeyToDoor-v0"}, "model": {"type": "memo", "mode": "fct"}}
    assert default_label(unnamed) == "memrl/DarkKeyToDoor-v0 fct"


def test_runs_of_different_configs_get_their_own_labels_or_a_warning(tmp_path, caplog):
    """A corridor quickstart and a Dark-Key-To-Door run are not two seeds of one experiment."""
    memo = {"type": "memo", "mode": "memo"}
    corridor = _run(tmp_path, "c", memo, 0.001, name=None, env="memrl/MemoryCorridor-v0")
    key_door = _run(tmp_path, "k", memo, 0.002, name=None, env="memrl/DarkKeyToDoor-v0")
    out = compare_runs([corridor, key_door], output=tmp_path / "cmp", points=1)
    assert [r["label"] for r in out["rows"]] == ["c", "k"] and out["warnings"] == []
    # Forced under one label, they are averaged, with a warning that names what differs.
    with caplog.at_level("WARNING", logger="memrl.experiment.compare"):
        out = compare_runs([corridor, key_door], ["memo", "memo"], output=tmp_path / "cmp")
    assert len(out["warnings"]) == 1 and "env.id" in out["warnings"][0]
    assert "name: 'c' vs 'k'" in out["warnings"][0]
    assert "differ in more than run.seed" in caplog.text


def test_compare_command(tmp_path):
    runs = [
        str(_run(tmp_path, f"r{i}", {"type": "mlp"}, 0.001, name="mlp", seed=i)) for i in range(2)
    ]
    out = memrl_cli("compare", *runs, "--output", str(tmp_path / "cmp"), "--json")
    assert out.returncode == 0, out.stderr
    assert '"label": "mlp"' in out.stdout and (tmp_path / "cmp" / "compare.png").is_file()
    out = memrl_cli("compare", str(tmp_path / "missing"))
    assert out.returncode == 2 and out.stderr.startswith("error: ") and "not a run" in out.stderr
