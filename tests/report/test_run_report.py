"""`memrl report`: one self-contained page with curves, evaluation, replays and transcripts."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
from memrl_testing import memrl_cli
from report_helpers import key_door_rows, make_key_door_run, make_mem1_run, mem1_rows

from memrl.experiment.run_plots import draw_training, training_panels, x_axis
from memrl.experiment.run_report import collect, glance, write_run_report


def _payload(page: str) -> dict:
    text = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.S)
    return json.loads(text.group(1))


def test_page_is_self_contained(tmp_path):
    page = write_run_report(make_key_door_run(tmp_path)).read_text()
    # Nothing is fetched: no external scripts, styles, images or fonts.
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page)
    assert "<link" not in page and "@import" not in page
    assert not re.search(r"url\((?!#)", page)  # only the SVG's references to its own clip paths
    assert page.count("<svg") == 1 and "<script>" in page and "<style>" in page
    for section in ("glance", "training", "evaluation", "replay", "config"):
        assert f'id="{section}"' in page
    assert 'id="transcripts"' not in page  # a grid env has replays, not transcripts
    assert len(_payload(page)["replays"]) == 2


def test_glance_says_whether_memory_was_used(tmp_path):
    used = glance(collect(make_key_door_run(tmp_path / "a", memory=True)))
    assert any(cls == "verdict-yes" and "uses its memory" in s for cls, s in used)
    assert any("1.95 on average, the first 0.80 (evaluation, 4 trials)" in s for _, s in used)
    unused = glance(collect(make_key_door_run(tmp_path / "b", memory=False)))
    assert any(cls == "verdict-no" and "No clear sign" in s for cls, s in unused)
    # Without an evaluation the last tenth of training decides (and the page says how to add one).
    training_only = glance(collect(make_key_door_run(tmp_path / "c", evaluated=False)))
    assert any("last tenth of training" in s and cls == "verdict-yes" for cls, s in training_only)
    assert any("memrl eval" in s for _, s in training_only)


@pytest.mark.parametrize("spread, verdict", [(0.01, "verdict-yes"), (25.0, "verdict-no")])
def test_glance_from_training_needs_the_gain_above_its_noise(tmp_path, spread, verdict):
    # The same means (later inner episodes ~0.9 above the first); only the returns' spread
    # differs: 2 standard errors over 100 trials are 0.03 and 1.4.
    run = make_key_door_run(tmp_path, memory=True, evaluated=False)
    pd.DataFrame(key_door_rows(memory=True, spread=spread)).to_parquet(run / "metrics.parquet")
    lines = glance(collect(run))
    assert any(cls == verdict and "last tenth of training" in s for cls, s in lines), lines


@pytest.mark.parametrize("success, verdict", [(0.97, "verdict-yes"), (0.55, "verdict-no")])
def test_corridor_glance_sets_success_against_the_memoryless_bound(tmp_path, success, verdict):
    run = tmp_path / "corridor_run"
    run.mkdir()
    config = {"name": "quickstart", "env": {"id": "memrl/MemoryCorridor-v0"}}
    (run / "config.yaml").write_text(json.dumps(config))
    rows = [
        {
            "training_iteration": i + 1,
            "env_steps_sampled": 2112 * (i + 1),
            "time_total_s": 3.0 * (i + 1),
            "episode_return_mean": 0.0,
            "inner_return_0": 0.0,
            "inner_success_rate": 0.5 if i < 18 else success,
        }
        for i in range(20)
    ]
    pd.DataFrame(rows).to_parquet(run / "metrics.parquet")
    lines = glance(collect(run))
    assert any(
        cls == verdict and f"success {success:.1%} over the last tenth" in s and "50% at best" in s
        for cls, s in lines
    ), lines


def test_mem1_run_has_transcripts_text_scores_and_memory(tmp_path):
    run = make_mem1_run(tmp_path)
    page = write_run_report(run).read_text()
    data = _payload(page)["transcripts"]
    assert data["total"] == 3 and data["window"] == 1 and data["state_tag"] == "think"
    assert data["action_tags"] == ["search", "answer"]
    turns = data["episodes"][0]["turns"]  # contexts 40, 70, 75, 80: shares 30, 35, 40
    assert [(t["kept_tokens"], t["dropped_tokens"]) for t in turns] == [
        (40, 0),
        (70, 0),
        (75, 30),
        (80, 65),
    ]
    # A closing script tag inside an observation cannot end the data block early.
    block = page.split('id="report-data">', 1)[1].split("</script>")[0]
    assert "passage 0" in block and "</script> </information>" not in block
    assert "passage 0 </script> </information>" in json.dumps(data)
    # peaks 80, 71, 79 (mean 77); whole histories at the last turn 40 + 30 + 35 + 40 = 145,
    # 40 + 26 + 31 = 97 and 40 + 32 + 34 + 39 = 145 (mean 129)
    assert (
        "verdict-yes",
        "Context per turn peaked at 77 tokens on average; keeping every turn would have reached "
        "129 tokens by the last turn (mem1 context policy).",
    ) in glance(collect(run))
    assert "exact match 0.6670" in page and "peak tokens (mean)" in page


def test_training_panels_follow_what_the_run_logged():
    mem1 = pd.DataFrame(mem1_rows())
    titles = [p.title for p in training_panels(mem1)]
    assert titles == [
        "reward per episode (training rollouts)",
        "exact match",
        "F1",
        "peak tokens in context",
        "context per turn",
        "dependency (attention work)",
        "learner loss",
    ]
    # A text agent's env steps are turns: its curves run over iterations, never as one dot.
    assert x_axis(mem1) == ("training_iteration", "training iteration")
    fig = draw_training(mem1, "mem1")
    assert len(fig.axes) == len(titles)  # no empty panel
    em = fig.axes[1]
    legend = [t.get_text() for t in em.get_legend().get_texts()]
    assert legend == ["held-out", "held-out (unseen)", "training rollouts"]
    # Held-out scores come every other iteration: their points are joined, none is dropped.
    assert [len(line.get_xdata()) for line in em.lines] == [6, 6, 12]
    assert list(em.lines[0].get_xdata()) == [1, 3, 5, 7, 9, 11]


def test_report_command_errors_and_writes(tmp_path):
    out = memrl_cli("report", str(tmp_path / "nowhere"))
    assert out.returncode == 2 and out.stderr.startswith("error: ")
    assert "no config.yaml" in out.stderr
    run = make_mem1_run(tmp_path)
    out = memrl_cli("report", str(run), "--output", str(tmp_path / "r.html"))
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "r.html").stat().st_size > 10_000


@pytest.mark.parametrize("kind", ["key_door", "mem1"])
def test_report_without_metrics_or_evaluation_still_renders(tmp_path, kind):
    run = (make_key_door_run if kind == "key_door" else make_mem1_run)(tmp_path)
    (run / "metrics.parquet").unlink()
    for path in (run / "eval").iterdir():
        path.unlink()
    page = write_run_report(run).read_text()
    assert "No training metrics yet" in page and "No evaluation yet" in page


def test_report_of_a_run_on_a_storage_uri(tmp_path):
    # A file:// URI takes the same path as s3:// or gs://: read through pyarrow, written back.
    store = make_key_door_run(tmp_path / "bucket")
    out = memrl_cli("report", store.as_uri())
    assert out.returncode == 0, out.stderr
    assert f"wrote {store.as_uri()}/report.html" in out.stdout
    page = (store / "report.html").read_text()
    assert "uses its memory" in page and 'id="replay"' in page
    local = tmp_path / "copy.html"
    out = memrl_cli("report", store.as_uri(), "--output", str(local))
    assert out.returncode == 0 and "uses its memory" in local.read_text()
    missing = memrl_cli("report", (tmp_path / "bucket" / "nothing").as_uri())
    assert missing.returncode == 2
    assert "nothing is not a run directory (it has no config.yaml)" in missing.stderr
