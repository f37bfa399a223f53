"""`memrl report RUN_DIR`: one self-contained HTML page that shows what a run's agent did.

The page (``<run>/report.html`` by default; written at the end of ``memrl train`` and of
``memrl eval``) holds, with no server and no network (figures are inline SVG, the script and the
style are inline):

- "at a glance": whether the agent used its memory, in numbers (later inner episodes of a trial
  against the first; for text agents, the context kept per turn against what keeping every turn
  would have cost), with return, exact match and memory figures;
- the training curves (run_plots.py) and the evaluation table (``<run>/eval/*.json``);
- for grid and navigation envs, a replay of evaluation trials (``eval/*.replay.json``): a frame
  slider and play button over the hidden layout, the agent's path and the steps per inner episode;
- for text agents, a transcript browser (``eval/*.transcripts.jsonl``, transcripts.py): per
  episode its outcome, per turn the context the model saw, its internal state, its action, the
  observation, and the tokens kept vs dropped;
- the resolved config.
"""

from __future__ import annotations

import contextlib
import html
import json
import logging
import math
import os
import re
import tempfile
import time
from importlib import resources
from pathlib import Path
from typing import Any

from memrl.experiment.memory_verdict import gain_is_clear, recalls, recent_gain_noise
from memrl.experiment.run_dir import CONFIG, EVAL, METRICS, REPORT, RunDir, is_uri
from memrl.experiment.tables import format_number, read_table

logger = logging.getLogger(__name__)

TRANSCRIPT_LIMIT = 50
"""Episodes of a transcripts file embedded in the page (the list says how many there are)."""


def write_run_report(run_dir: str | Path, output: str | Path | None = None) -> Path:
    """Writes the run's HTML report; returns its path.

    Raises:
        FileNotFoundError: ``run_dir`` is not a run directory (no config.yaml).
    """
    run = Path(run_dir)
    if not (run / CONFIG).is_file():
        raise FileNotFoundError(
            f"{run} is not a run directory (it has no config.yaml); give the directory that "
            "`memrl train` wrote, e.g. runs/quickstart"
        )
    out = Path(output) if output else run / REPORT
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_report(collect(run)), encoding="utf-8")
    return out


def collect(run: Path) -> dict[str, Any]:
    """Everything the page shows, read from the run directory."""
    config = RunDir(run).read_config()
    config_text = (run / CONFIG).read_text()
    frame = None
    if (run / METRICS).is_file():
        frame = read_table(run / METRICS)
    evals = _evaluations(run)
    latest = evals[-1] if evals else None
    replays: list[dict[str, Any]] = []
    transcripts = None
    if latest is not None:
        replay_file = latest["_path"].with_name(latest["_path"].stem + ".replay.json")
        if replay_file.is_file():
            replays = json.loads(replay_file.read_text()).get("trials", [])
        transcript_file = _transcripts_file(latest, run)
        if transcript_file is not None:
            transcripts = _transcript_view(transcript_file, config)
    return {
        "run": run,
        "name": config.get("name", run.name),
        "config": config,
        "config_text": config_text,
        "frame": frame,
        "evals": evals,
        "replays": replays,
        "transcripts": transcripts,
    }


def _evaluations(run: Path) -> list[dict[str, Any]]:
    """The run's evaluation results (eval/<checkpoint>.json), oldest checkpoint first."""
    found = []
    folder = run / EVAL
    if folder.is_dir():
        for path in folder.glob("*.json"):
            if path.name.endswith(".replay.json"):
                continue
            try:
                result = json.loads(path.read_text())
            except json.JSONDecodeError as err:
                logger.warning("%s is not JSON (%s); left out of the report", path, err)
                continue
            if isinstance(result, dict):
                found.append({**result, "_path": path})
    return sorted(found, key=lambda r: (_iteration(r["_path"].stem), r["_path"].stat().st_mtime))


def _iteration(name: str) -> int:
    match = re.search(r"(\d+)$", name)
    return int(match.group(1)) if match else -1


def _transcripts_file(result: dict[str, Any], run: Path) -> Path | None:
    named = result.get("transcripts")
    candidates = []
    if isinstance(named, str) and named:
        candidates += [Path(named), run / EVAL / Path(named).name]
    candidates.append(result["_path"].with_name(result["_path"].stem + ".transcripts.jsonl"))
    return next((p for p in candidates if p.is_file()), None)


def _transcript_view(path: Path, config: dict[str, Any]) -> dict[str, Any]:
    from memrl.experiment.transcripts import read_transcripts, window_of

    algorithm = config.get("algorithm") or {}
    policy = str(algorithm.get("context_policy", "mem1"))
    last_k = int(algorithm.get("last_k", 1))
    prompt = algorithm.get("prompt") or {}
    tags = prompt.get("tags") or {}
    webshop = prompt.get("format") == "webshop"
    view = read_transcripts(path, policy=policy, last_k=last_k, limit=TRANSCRIPT_LIMIT)
    view.update(
        policy=policy,
        window=window_of(policy, last_k),
        state_tag=tags.get("summary", "summary") if webshop else tags.get("state", "think"),
        action_tags=[tags.get("search", "search"), tags.get("answer", "answer")],
        scratch="think" if webshop else None,
        file=path.name,
    )
    return view


# ---- "at a glance" --------------------------------------------------------------------------


def glance(data: dict[str, Any]) -> list[tuple[str, str]]:
    """(css class, sentence) lines saying what the agent achieved and whether memory helped."""
    lines: list[tuple[str, str]] = []
    frame = data["frame"]
    latest = data["evals"][-1] if data["evals"] else None
    if frame is not None and len(frame):
        last = frame.iloc[-1]
        steps = int(last.get("env_steps_sampled", 0) or 0)
        lines.append(
            (
                "",
                f"Trained {int(last['training_iteration'])} iterations"
                + (f", {format_number(steps)} env steps" if steps else "")
                + f", {format_number(round(float(last.get('time_total_s', 0.0))))} s.",
            )
        )
    inner = _inner_returns(latest, frame)
    if inner is not None:
        source, values = inner
        first, later = values[0], sum(values[1:]) / len(values[1:])
        # The summary's rule: from training metrics that carry the returns' spread, the gain
        # must beat its noise; from an evaluation's few trials, a fixed floor stands in for it.
        noise = None
        if not source.startswith("evaluation"):
            noise = recent_gain_noise(frame.to_dict("records"))
        used = gain_is_clear(first, later, noise)
        verdict = "The agent uses its memory" if used else "No clear sign of memory use"
        lines.append(
            (
                "verdict-yes" if used else "verdict-no",
                f"{verdict}: later inner episodes of a trial return {later:.2f} on "
                f"average, the first {first:.2f} ({source}). The layout is hidden, so "
                "only what the agent remembers of earlier inner episodes can make later ones "
                "faster.",
            )
        )
    elif (success := _success_against_memoryless(data, frame)) is not None:
        lines.append(success)
    if latest is not None:
        parts = [f"return {format_number(latest.get('return_mean', math.nan))}"]
        for key, label in (("em_mean", "exact match"), ("f1_mean", "F1"), ("em", "exact match")):
            if isinstance(latest.get(key), int | float):
                parts.append(f"{label} {format_number(latest[key])}")
        lines.append(
            (
                "",
                f"Evaluation of {latest['_path'].stem} over "
                f"{format_number(latest.get('episodes', 0))} episodes: " + ", ".join(parts) + ".",
            )
        )
    memory = _memory_sentence(data.get("transcripts"))
    if memory:
        lines.append(memory)
    if latest is None:
        lines.append(("", f"No evaluation yet: `memrl eval {data['run']}` adds one (and replays)."))
    return lines


def _inner_returns(latest: dict[str, Any] | None, frame: Any) -> tuple[str, list[float]] | None:
    if latest and len(latest.get("inner_return_by_index") or []) >= 2:
        where = f"evaluation, {format_number(latest.get('episodes', 0))} trials"
        return where, [float(v) for v in latest["inner_return_by_index"]]
    if frame is None or not len(frame):
        return None
    cols = sorted(
        (c for c in frame.columns if re.fullmatch(r"inner_return_\d+", c)),
        key=lambda c: int(c.rsplit("_", 1)[1]),
    )
    tail = frame.iloc[-max(1, len(frame) // 10) :]
    values = [float(tail[c].mean()) for c in cols if tail[c].notna().any()]
    if len(values) < 2:
        return None
    return "last tenth of training", values


def _success_against_memoryless(data: dict[str, Any], frame: Any) -> tuple[str, str] | None:
    """For envs that state the best success without memory (the corridor): the last tenth of
    training's success against it."""
    from memrl.envs import memoryless_success

    env_id = (data["config"].get("env") or {}).get("id")
    bound = memoryless_success(env_id) if isinstance(env_id, str) else None
    if bound is None or frame is None or "inner_success_rate" not in frame.columns:
        return None
    tail = frame["inner_success_rate"].iloc[-max(1, len(frame) // 10) :].dropna()
    if not len(tail):
        return None
    success = float(tail.mean())
    used = recalls(success, bound)
    verdict = "The agent uses its memory" if used else "No clear sign of memory use"
    return (
        "verdict-yes" if used else "verdict-no",
        f"{verdict}: success {success:.1%} over the last tenth of training, against "
        f"{bound:.0%} at best for a policy without memory (what it must act on was shown earlier "
        "in the trial and is hidden since).",
    )


def _memory_sentence(transcripts: dict[str, Any] | None) -> tuple[str, str] | None:
    if not transcripts:
        return None
    kept, full = [], []
    for episode in transcripts["episodes"]:
        turns = [t for t in episode["turns"] if t["kept_tokens"] is not None]
        if turns:
            kept.append(max(t["kept_tokens"] for t in turns))
            full.append(turns[-1]["kept_tokens"] + (turns[-1]["dropped_tokens"] or 0))
    if not kept:
        return None
    peak, whole = sum(kept) / len(kept), sum(full) / len(full)
    return (
        "verdict-yes" if whole > peak else "",
        f"Context per turn peaked at {format_number(round(peak))} tokens on average; keeping "
        f"every turn would have reached {format_number(round(whole))} tokens by the last turn "
        f"({transcripts['policy']} context policy).",
    )


# ---- HTML -----------------------------------------------------------------------------------


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(r.get(c, '')))}</td>" for c in columns) + "</tr>"
        for r in rows
    )
    return f'<table class="data"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _cell(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(format_number(v) for v in value)
    return format_number(value)


EVAL_COLUMNS: tuple[tuple[str, str], ...] = (
    ("episodes", "episodes"),
    ("return_mean", "return (mean)"),
    ("return_std", "return (std)"),
    ("len_mean", "length (steps or turns)"),
    ("inner_return_by_index", "return of inner episode 1, 2, ..."),
    ("inner_success_rate", "inner success rate"),
)


def eval_table(evals: list[dict[str, Any]]) -> str:
    """The evaluation results as an HTML table (one row per evaluated checkpoint)."""
    rows, columns = [], ["checkpoint"]
    extra = sorted(
        {k for r in evals for k, v in r.items() if k.endswith("_mean") and isinstance(v, float)}
        - {k for k, _ in EVAL_COLUMNS}
    )
    for result in evals:
        row = {"checkpoint": result["_path"].stem}
        for key, label in EVAL_COLUMNS:
            if key in result:
                row[label] = (
                    [round(v, 2) for v in result[key][:10]]
                    if isinstance(result[key], list)
                    else result[key]
                )
                if label not in columns:
                    columns.append(label)
        for key in extra:
            if key in result:
                label = key[: -len("_mean")].replace("_", " ") + " (mean)"
                row[label] = result[key]
                if label not in columns:
                    columns.append(label)
        rows.append(row)
    return _table(rows, columns)


def render_report(data: dict[str, Any]) -> str:
    """The whole page as one HTML string."""
    from memrl.experiment.run_plots import draw_training, figure_svg

    config = data["config"]
    env = (config.get("env") or {}).get("id", "?")
    algorithm = (config.get("algorithm") or {}).get("name", "ppo")
    model = config.get("model") or {}
    model_name = model.get("type", "mlp") + (f" ({model['mode']})" if model.get("mode") else "")
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>memrl run report: {html.escape(str(data['name']))}</title>",
        f"<style>{_asset('report.css')}</style></head><body>",
        f"<header><h1>{html.escape(str(data['name']))}</h1>",
        f'<p class="sub">{html.escape(env)} · algorithm {html.escape(str(algorithm))} · '
        f"model {html.escape(model_name)} · run directory {html.escape(str(data['run']))}</p>"
        "</header>",
        '<section id="glance"><h2>At a glance</h2><ul class="glance">',
    ]
    for cls, sentence in glance(data):
        parts.append(f'<li class="{cls}">{html.escape(sentence)}</li>')
    parts.append("</ul></section>")

    parts.append('<section id="training"><h2>Training</h2>')
    fig = draw_training(data["frame"], str(data["name"])) if data["frame"] is not None else None
    if fig is None:
        parts.append("<p>No training metrics yet (metrics.parquet is missing or empty).</p>")
    else:
        parts.append(f'<div class="figure">{figure_svg(fig)}</div>')
    parts.append("</section>")

    parts.append('<section id="evaluation"><h2>Evaluation</h2>')
    if data["evals"]:
        parts.append(eval_table(data["evals"]))
    else:
        parts.append(
            f"<p>No evaluation yet. Run <code>memrl eval {html.escape(str(data['run']))}</code>"
            " to add one.</p>"
        )
    parts.append("</section>")

    if data["replays"]:
        parts.append(
            '<section id="replay"><h2>Replay of evaluation trials</h2>'
            '<p class="note">The whole layout is drawn, although the agent sees only its own '
            "cell. The red line is the path of the current inner episode. An agent that "
            "remembers finds the goal by searching in the first inner episode, then goes "
            "straight to it in the later ones (fewer steps per inner episode).</p>"
            '<div class="controls"><select id="replay-trial"></select>'
            '<button id="replay-prev" type="button">◀ step</button>'
            '<button id="replay-play" type="button">▶ play</button>'
            '<button id="replay-next" type="button">step ▶</button>'
            '<input id="replay-step" type="range" min="0" max="0" value="0"></div>'
            '<div id="replay-status"></div>'
            '<div class="replay"><canvas id="replay-canvas"></canvas>'
            '<div id="replay-side"></div></div></section>'
        )
    transcripts = data["transcripts"]
    if transcripts:
        shown = len(transcripts["episodes"])
        parts.append(
            '<section id="transcripts"><h2>Transcripts</h2>'
            f'<p class="note">{shown} of {transcripts["total"]} evaluation episodes '
            f"({html.escape(transcripts['file'])}); context policy "
            f"{html.escape(transcripts['policy'])}. Click an episode; per turn: the tokens "
            "kept (green) vs dropped (grey), the context the model saw, its internal state, its "
            "action and the observation.</p>"
            '<div class="browser"><ol id="episode-list"></ol><div id="episode-view"></div></div>'
            "</section>"
        )
    parts.append(
        '<section id="config"><h2>Config</h2><details><summary>config.yaml</summary>'
        f"<pre>{html.escape(data['config_text'])}</pre></details></section>"
    )
    parts.append(
        f"<footer>Written by <code>memrl report</code> on {time.strftime('%Y-%m-%d %H:%M')}. "
        "Files of the run: config.yaml, metrics.parquet, checkpoints/, tb/ (TensorBoard), "
        "eval/ (results, replays, transcripts).</footer>"
    )
    payload = {"replays": data["replays"], "transcripts": transcripts}
    parts.append(
        '<script type="application/json" id="report-data">' + _script_json(payload) + "</script>"
    )
    parts.append(f"<script>{_asset('report.js')}</script></body></html>")
    return "\n".join(parts)


def _script_json(value: Any) -> str:
    """JSON that is safe inside a <script> element (no closing tag can appear in it)."""
    text = json.dumps(value, separators=(",", ":"), allow_nan=False, default=str)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _asset(name: str) -> str:
    return resources.files("memrl.experiment").joinpath("report_assets", name).read_text("utf-8")


def refresh_report(
    run: RunDir, output: str | os.PathLike[str] | None = None, *, local_copy: bool = False
) -> str:
    """Writes the run's report.html (or ``output``); for a run on a URI, from a local copy of
    what it reads (``local_copy``: ``run.path`` already holds it, else it is downloaded), and
    uploaded to the run unless ``output`` is given."""
    if not run.staged:
        return str(write_run_report(run.path, output))
    with contextlib.ExitStack() as stack:
        source = run.path
        if not local_copy:
            source = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="memrl-report-")))
            for name in (CONFIG, METRICS, EVAL):
                run.download(name, source / name)
        page = write_run_report(source, output)
        if output:
            return str(page)
        run.write_bytes(REPORT, page.read_bytes())
    return run.uri(REPORT)


def report_at(
    location: str | os.PathLike[str], output: str | os.PathLike[str] | None = None
) -> str:
    """`memrl report`: the report of the run at ``location`` (a path or a URI), written to
    ``output`` or else to the run's own report.html; returns where it went.

    Raises:
        FileNotFoundError: ``location`` holds no run (no config.yaml).
    """
    if not is_uri(location):
        return str(write_run_report(location, output))
    with tempfile.TemporaryDirectory(prefix="memrl-report-") as tmp:
        run = RunDir(location, tmp)
        if not run.exists(CONFIG):
            raise FileNotFoundError(
                f"{run.location} is not a run directory (it has no config.yaml); give the "
                "location that `memrl train --output` wrote to"
            )
        return refresh_report(run, output)
