"""The `memrl` command as a user meets it: help, listings and clean errors (no Ray needed)."""

from __future__ import annotations

import pytest
from memrl_testing import REPO, memrl_cli, write_config

from memrl import plugins


def test_top_level_help_lists_commands():
    out = memrl_cli("--help")
    assert out.returncode == 0
    for cmd in ("train", "eval", "tune", "bench", "serve", "data"):
        assert cmd in out.stdout


@pytest.mark.parametrize("cmd", ["train", "eval", "tune"])
def test_subcommand_help(cmd):
    out = memrl_cli(cmd, "--help")
    assert out.returncode == 0 and f"usage: memrl {cmd}" in out.stdout


@pytest.mark.parametrize("group", sorted(plugins.GROUPS))
def test_group_listing_names_every_command(group):
    out = memrl_cli(group, "--help")
    assert out.returncode == 0, out.stderr
    for name in plugins.command_names(group):
        assert name in out.stdout
        assert "(unavailable" not in out.stdout, out.stdout
    bare = memrl_cli(group)
    assert bare.returncode == 2 and f"usage: memrl {group} NAME" in bare.stdout


def test_unknown_group_command_lists_what_exists():
    out = memrl_cli("bench", "no-such-bench")
    assert out.returncode == 2
    assert "Unknown bench command 'no-such-bench'. Available:" in out.stderr
    assert "Traceback" not in out.stderr


def test_missing_config_is_a_clean_error():
    out = memrl_cli("train", "configs/does_not_exist.yaml")
    assert out.returncode == 2
    assert out.stderr.startswith("error: Config file 'configs/does_not_exist.yaml' not found")
    assert "Traceback" not in out.stderr


def test_a_directory_as_config_says_so():
    out = memrl_cli("train", "configs/")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "is a directory, not a config file" in out.stderr and "quickstart.yaml" in out.stderr


def test_a_missing_optional_dependency_is_one_error_line(tmp_path):
    """A command whose optional import fails reports it in one line (a module shadowing a real
    dependency with one that raises ImportError stands for an extra that is not installed)."""
    (tmp_path / "bm25s.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'bm25s'\", name='bm25s')\n"
    )
    out = memrl_cli(
        "data",
        "index",
        "--synthetic",
        "60",
        "--output",
        str(tmp_path / "idx"),
        env={"PYTHONPATH": f"{tmp_path}:{REPO}"},
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert out.stderr.startswith("error: bm25s is not installed: it comes with the 'web' extra")
    assert len(out.stderr.splitlines()) == 1


def test_bad_key_and_bad_override_are_clean_errors(tmp_path):
    cfg = write_config(tmp_path / "c.yaml", run={"stop_iters": 1, "bogus": 1})
    out = memrl_cli("train", str(cfg))
    assert out.returncode == 2 and "run.bogus" in out.stderr and "Traceback" not in out.stderr
    good = write_config(tmp_path / "g.yaml")
    out = memrl_cli("train", str(good), "--set", "algorithm.lr=abc")
    assert out.returncode == 2 and "algorithm.lr must be a number" in out.stderr


def test_bad_env_config_fails_before_ray_starts(tmp_path):
    cfg = write_config(
        tmp_path / "c.yaml", env={"id": "memrl/DarkKeyToDoor-v0", "config": {"grid": 3}}
    )
    out = memrl_cli("train", str(cfg), "--output", str(tmp_path / "run"))
    assert out.returncode == 2
    assert "env.config does not fit memrl/DarkKeyToDoor-v0" in out.stderr


def test_eval_of_a_missing_checkpoint_is_a_clean_error(tmp_path):
    out = memrl_cli("eval", str(tmp_path / "nothing"))
    assert out.returncode == 2 and "does not exist" in out.stderr


def test_tune_without_a_tune_section_says_how_to_add_one(tmp_path):
    out = memrl_cli("tune", str(write_config(tmp_path / "t.yaml")), "--output", str(tmp_path / "s"))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.startswith("error: the config has no tune: section")
    assert "configs/tune_memo_key_door.yaml" in out.stderr
