"""The `memrl` command on hostile input: YAML alias cycles and bombs, deep nesting, deeply nested
JSON files, an --output under a regular file or where nothing may be written, absurd counts, a
run whose config.yaml or metrics.parquet is damaged. Each is one ``error:`` line and exit code 2,
quickly (no traceback, no MemoryError after a minute); regenerated files keep their mode.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest
from memrl_testing import REPO, cli_error_line, write_config

from memrl.envs.webshop import generator

DEEP_JSON = "[" * 100_000 + "]" * 100_000
RUN = REPO / "tests" / "fixtures" / "checkpoints" / "mlp_v0_1"
"""A real run directory (config, metrics, a checkpoint), copied by the tests that damage it."""


def _alias_bomb() -> str:
    """Ten levels of nine aliases each: about 9^10 values once expanded, in under 500 bytes."""
    lines = ["a0: &a0 [x,x,x,x,x,x,x,x,x]"]
    for i in range(1, 10):
        uses = ",".join([f"*a{i - 1}"] * 9)
        lines.append(f"a{i}: &a{i} [{uses}]")
    text = "\n".join(lines) + "\n"
    assert len(text) < 500
    return text


@pytest.mark.parametrize(
    "text, message",
    [
        ("a: &a [*a]\n", "refers to a node that contains it"),
        ("a: &a {b: *a}\n", "refers to a node that contains it"),
        (_alias_bomb(), "expand to more than 100,000 values"),
        ("a: " + "[" * 20_000 + "]" * 20_000 + "\n", "nested too deeply"),
        ("a: " + "[" * 150 + "]" * 150 + "\n", "nested deeper than 100 levels"),
        ("a: [1, 2\nb: 3\n", "expected ',' or ']', but got ':' at line 2, column 2"),
    ],
    ids=["cycle", "mapping-cycle", "alias-bomb", "20k-brackets", "150-brackets", "syntax"],
)
def test_malformed_yaml_configs_are_one_error_line(tmp_path, capsys, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert message in cli_error_line(capsys, "train", str(path))


def test_set_values_are_parsed_with_the_same_limits(tmp_path, capsys):
    config = write_config(tmp_path / "c.yaml")
    deep = "[" * 20_000 + "]" * 20_000
    err = cli_error_line(capsys, "train", str(config), "--set", f"run.seed={deep}")
    assert "--set run.seed: cannot parse value" in err and "nested too deeply" in err


def test_anchors_and_merge_keys_still_work(tmp_path):
    from memrl.experiment.config import load_config

    path = tmp_path / "anchors.yaml"
    path.write_text(
        "env: {id: memrl/DarkKeyToDoor-v0, config: &size {size: 4}}\n"
        "model: {type: mlp, hiddens: &h [16, 16]}\n"
        "tune: {note: [*h, *h, *size]}\n"
    )
    exp = load_config(path)
    assert exp.env.config == {"size": 4} and list(exp.model.hiddens) == [16, 16]


def test_deeply_nested_json_in_a_webshop_catalogue(tmp_path, capsys):
    (tmp_path / "items_shuffle.json").write_text(DEEP_JSON)
    err = cli_error_line(
        capsys, "serve", "webshop", "--data-dir", str(tmp_path), "--products", "100", "--port", "0"
    )
    assert "items_shuffle.json: JSON nested too deeply" in err


@pytest.mark.parametrize("as_list", [True, False], ids=["json-list", "jsonl"])
def test_deeply_nested_json_in_a_qa_file(tmp_path, capsys, as_list):
    questions = tmp_path / "q.json"
    good = json.dumps({"question": "q?", "answer": "a"})
    questions.write_text(DEEP_JSON if as_list else good + "\n" + DEEP_JSON + "\n")
    err = cli_error_line(
        capsys,
        "data",
        "qa",
        "--questions",
        str(questions),
        "--passages",
        str(tmp_path / "p.jsonl"),
        "--output",
        str(tmp_path / "out"),
    )
    assert "nested too deeply" in err
    assert ("line 2" in err) != as_list


@pytest.mark.parametrize("flag", ["--flashrag", "--hotpotqa"])
def test_deeply_nested_json_in_a_tasks_source(tmp_path, capsys, flag):
    source = tmp_path / "src.json"
    source.write_text(DEEP_JSON + "\n")
    err = cli_error_line(
        capsys, "data", "tasks", flag, str(source), "--output", str(tmp_path / "t")
    )
    assert "nested too deeply" in err


def test_deeply_nested_json_in_a_corpus_line(tmp_path, capsys):
    source = tmp_path / "corpus.jsonl"
    source.write_text(DEEP_JSON + "\n")
    err = cli_error_line(
        capsys, "data", "corpus", "--input", str(source), "--output", str(tmp_path / "c.parquet")
    )
    assert "corpus.jsonl:1: malformed corpus line (JSON nested too deeply)" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["data", "webshop", "--products", "100", "--output", "{file}/sub"],
        ["data", "corpus", "--synthetic", "100", "--output", "{file}/sub/c.parquet"],
        ["data", "tasks", "--synthetic", "300", "--num-tasks", "5", "--output", "{file}/t"],
        ["train", "{config}", "--output", "{file}/run"],
    ],
    ids=["webshop", "corpus", "tasks", "train"],
)
def test_an_output_under_a_regular_file(tmp_path, capsys, argv):
    file = tmp_path / "a-file"
    file.write_text("not a folder")
    config = write_config(tmp_path / "c.yaml")
    argv = [a.format(file=file, config=config) for a in argv]
    err = cli_error_line(capsys, *argv)
    assert "a-file" in err and ("is a file, not a folder" in err or "Not a directory" in err)
    assert file.read_text() == "not a folder"


def test_an_absurd_instruction_count_is_refused_at_once(tmp_path, capsys):
    err = cli_error_line(
        capsys, "data", "webshop", "--products", "100", "--instructions", str(10**10),
        "--output", str(tmp_path / "ws"),
    )  # fmt: skip
    assert "at most 10 per product (1,000 for 100 products), got 10,000,000,000" in err
    assert not (tmp_path / "ws").exists()


def test_regenerated_catalogue_files_keep_their_mode(tmp_path):
    umask = os.umask(0o022)
    try:
        paths = generator.generate_catalogue(tmp_path, 100, seed=0)
        assert {stat.S_IMODE(p.stat().st_mode) for p in paths.values()} == {0o644}
        generator.generate_catalogue(tmp_path, 100, seed=1)  # regenerated: replaced, still 644
        assert {stat.S_IMODE(p.stat().st_mode) for p in paths.values()} == {0o644}
        paths["human"].chmod(0o640)
        generator.generate_catalogue(tmp_path, 100, seed=2)
        assert stat.S_IMODE(paths["human"].stat().st_mode) == 0o640  # a chosen mode is kept
        assert not list(Path(tmp_path).glob(".*partial"))
    finally:
        os.umask(umask)


@pytest.mark.parametrize(
    "argv",
    [
        ["eval", "{run}", "--episodes", "1"],
        ["export", "{run}", "--format", "rlmodule", "--output", "{tmp}/out"],
        ["report", "{run}"],
        ["compare", "{run}", "--output", "{tmp}/cmp"],
        ["train", "{config}", "--output", "{run}", "--resume"],
    ],
    ids=["eval", "export", "report", "compare", "resume"],
)
def test_an_unparseable_run_config_is_named(tmp_path, capsys, argv):
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    (run / "config.yaml").write_text("name: run\nmodel: {type: mlp\n")
    config = write_config(tmp_path / "c.yaml")
    argv = [a.format(run=run, tmp=tmp_path, config=config) for a in argv]
    err = cli_error_line(capsys, *argv)
    assert f"error: {run}/config.yaml cannot be read (not valid YAML: " in err
    assert "repair it" in err


def test_compare_names_the_run_whose_metrics_are_damaged(tmp_path, capsys):
    runs = [tmp_path / "a", tmp_path / "b"]
    for run in runs:
        shutil.copytree(RUN, run)
    metrics = runs[1] / "metrics.parquet"
    metrics.write_bytes(metrics.read_bytes()[:100])
    err = cli_error_line(capsys, "compare", *map(str, runs), "--output", str(tmp_path / "c"))
    assert f"error: {metrics} is not a readable parquet table (" in err


@pytest.mark.parametrize(
    "argv, hint",
    [
        # sysfs takes no new folders, even from root (a read-only folder would not stop root).
        (["compare", "{run}", "--output", "/sys/memrl-compare"], "this user may not write"),
        (["report", "{run}", "--output", "{tmp}"], "a folder is where a file should be"),
    ],
    ids=["no-write-permission", "a-folder"],
)
def test_an_output_that_cannot_be_written(tmp_path, capsys, argv, hint):
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    err = cli_error_line(capsys, *[a.format(run=run, tmp=tmp_path) for a in argv])
    assert hint in err
