"""`memrl data corpus|index|tasks` build files that the env and the server then use."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from memrl.data import corpus as corpus_cmd
from memrl.data import index as index_cmd
from memrl.data import tasks as tasks_cmd
from memrl.envs.doc_qa import DocQAEnv
from memrl.envs.doc_qa.agent import ScriptedAgent, run_episode
from memrl.envs.retrieval.corpus import load_corpus


def _args(module, argv):
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    return parser.parse_args(argv)


def test_synthetic_corpus_index_tasks_feed_the_env(tmp_path, capsys):
    assert (
        tasks_cmd.run(
            _args(
                tasks_cmd,
                ["--synthetic", "300", "--num-tasks", "12", "--output", str(tmp_path / "tasks")],
            )
        )
        == 0
    )
    assert (
        index_cmd.run(
            _args(
                index_cmd,
                ["--synthetic", "300", "--no-progress", "--output", str(tmp_path / "idx")],
            )
        )
        == 0
    )
    meta = json.loads((tmp_path / "idx" / "memrl_index.json").read_text())
    assert meta["kind"] == "bm25" and meta["num_docs"] == 300
    env = DocQAEnv(tasks=str(tmp_path / "tasks"), index=str(tmp_path / "idx"), split="test")
    assert len(env.tasks) == 12
    ems = [run_episode(env, ScriptedAgent(), options={"task_index": i})["em"] for i in range(12)]
    assert sum(em == 2.0 for em in ems) >= 11
    assert "wrote 12 test tasks" in capsys.readouterr().out


def test_convert_wiki_jsonl_skipping_malformed(tmp_path, capsys):
    src = tmp_path / "wiki.jsonl"
    src.write_text(
        "\n".join(
            [
                json.dumps({"id": "1", "contents": '"A"\nalpha'}),
                "oops",
                json.dumps({"id": "2", "contents": '"B"\nbeta'}),
            ]
        )
        + "\n"
    )
    out = tmp_path / "wiki.parquet"
    with pytest.raises(ValueError, match="wiki.jsonl:2"):
        corpus_cmd.run(_args(corpus_cmd, ["--input", str(src), "--output", str(out)]))
    assert (
        corpus_cmd.run(
            _args(corpus_cmd, ["--input", str(src), "--skip-malformed", "--output", str(out)])
        )
        == 0
    )
    assert "1 malformed line(s) skipped" in capsys.readouterr().out
    corpus, _ = load_corpus(out)
    assert [p.title for p in corpus.take([0, 1])] == ["A", "B"]


def test_flashrag_tasks_through_the_cli(tmp_path):
    src = tmp_path / "nq" / "test.jsonl"
    src.parent.mkdir()
    src.write_text(
        "\n".join(json.dumps({"question": f"q{i}", "golden_answers": [f"a{i}"]}) for i in range(9))
        + "\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "memrl",
            "data",
            "tasks",
            "--flashrag",
            str(src),
            "--split",
            "test",
            "--objectives",
            "4",
            "--output",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "wrote 2 test tasks of 4 questions" in done.stdout
    from memrl.envs.doc_qa.tasks import load_tasks

    tasks = load_tasks(tmp_path / "out", "test")
    assert [t.source for t in tasks] == ["nq", "nq"] and len(tasks[0].questions) == 4
