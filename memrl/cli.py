"""The `memrl` command: train, eval, tune, report, compare, export, and the bench/serve/data groups.

User errors (a bad config, a missing file, an impossible resource request, a damaged checkpoint
or one that does not fit the run's config, an output folder that cannot be written) are printed
as one ``error: ...`` line with exit code 2, without a traceback; ``MEMRL_DEBUG=1`` shows the
traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
import warnings
from collections.abc import Sequence

from memrl import plugins
from memrl.extras import missing_extra

EXIT_USAGE = 2
EXIT_INTERRUPTED = 1


def _add_set(p: argparse.ArgumentParser, help_text: str) -> None:
    p.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=help_text
    )


def _add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train an experiment config",
        description="Train an experiment (PPO on the new API stack by default) on an "
        "embedded local Ray, or on a cluster with --address.",
    )
    p.add_argument("config", help="experiment YAML, e.g. configs/quickstart.yaml")
    _add_set(p, "override a config value, e.g. --set algorithm.lr=1e-4 (repeatable)")
    p.add_argument("--stop-iters", type=int, help="training iterations (overrides run.stop_iters)")
    p.add_argument(
        "--stop-timesteps",
        type=int,
        help="env steps after which to stop (overrides run.stop_timesteps)",
    )
    p.add_argument(
        "--output",
        help="run directory, a path or a URI such as s3://bucket/runs/NAME "
        "(default: <run.storage or run.output_dir>/<name>)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in the run directory from its newest checkpoint",
    )
    p.add_argument("--address", help="join this Ray cluster (default: RAY_ADDRESS, else embedded)")
    p.add_argument("--dashboard", action="store_true", help="start the embedded Ray's dashboard")


def _add_eval(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval",
        help="evaluate a checkpoint (or a config's untrained policy)",
        description="Run episodes with a trained checkpoint (no exploration) and "
        "report returns, lengths and per-inner-episode returns. Given an experiment YAML, "
        "evaluate its untrained policy instead (for MEM1: the prompted model of model.path); "
        "results then go to eval_out/NAME/ unless --output says otherwise.",
    )
    p.add_argument(
        "checkpoint",
        help="a checkpoint dir (runs/NAME/checkpoints/iter_N) or a run dir, local or on the "
        "storage URI training wrote to (s3://bucket/runs/NAME), or an experiment YAML",
    )
    p.add_argument("--episodes", type=int, help="episodes to run (default: run.eval_episodes)")
    p.add_argument("--output", help="write the results as JSON to this file")
    _add_set(p, "override a value of the run's config, e.g. --set env.config.trial_len=1000")
    p.add_argument("--explore", action="store_true", help="sample actions instead of the mode")
    p.add_argument(
        "--replays",
        type=int,
        default=3,
        help="trials recorded step by step for the report's replay (grid and navigation envs; "
        "0: none; default: %(default)s)",
    )
    p.add_argument(
        "--eval-set",
        metavar="NAME",
        help="MEM1: play one of the config's named evaluation sets (algorithm.eval_extra, e.g. "
        "unseen_tasks: train-split tasks no training draws) instead of the main held-out set",
    )


def _add_report(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="write a run's HTML report",
        description="Write one self-contained HTML page of a run: training curves, evaluation "
        "table, replays of evaluation trials (grid envs) or transcripts (text agents), config. "
        "`memrl train` and `memrl eval` write it too.",
    )
    p.add_argument(
        "run_dir", help="a run directory (runs/NAME) or the storage URI training wrote to"
    )
    p.add_argument("--output", help="the HTML file (default: RUN_DIR/report.html)")


def _add_compare(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compare",
        help="plot several runs and seeds together",
        description="Curves of several runs on one plot (mean and spread per label: runs with "
        "the same label are seeds) and a table at equal env steps; writes PNG + parquet.",
    )
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories")
    p.add_argument(
        "--label",
        action="append",
        dest="labels",
        help="label of each run, in order (repeat once per run; default: the run's config name, "
        "else its env and model)",
    )
    p.add_argument(
        "--metric",
        default="episode_return_mean",
        help="metrics.parquet column to compare (default: %(default)s; e.g. inner_return_1)",
    )
    p.add_argument(
        "--points", type=int, default=4, help="env-step counts in the table (default: 4)"
    )
    p.add_argument(
        "--output", default="compare_out", help="output directory (default: %(default)s)"
    )
    p.add_argument("--json", action="store_true", help="print the table as JSON")


def _add_export(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="export a trained policy",
        description="Export a checkpoint's policy: hf (a Hugging Face model folder, LoRA "
        "merged), lora (a peft adapter folder) or rlmodule (an RLModule checkpoint that "
        "RLModule.from_checkpoint loads without memrl's training code).",
    )
    p.add_argument(
        "checkpoint",
        help="a checkpoint dir (runs/NAME/checkpoints/iter_N) or a run dir, local or on the "
        "storage URI training wrote to (s3://bucket/runs/NAME)",
    )
    p.add_argument("--format", required=True, choices=["hf", "lora", "rlmodule"], dest="fmt")
    p.add_argument("--output", required=True, help="a new or empty folder")


def _add_tune(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "tune",
        help="run a Tune sweep of an experiment config",
        description="Run the config's `tune:` section (search space, scheduler, "
        "metric) with Ray Tune.",
    )
    p.add_argument("config", help="experiment YAML with a tune: section")
    _add_set(p, "override a config value before the sweep (repeatable)")
    p.add_argument(
        "--output",
        help="sweep directory, a path or a URI (default: <run.storage or run.output_dir>/"
        "<name>-tune)",
    )
    p.add_argument("--resume", action="store_true", help="resume an interrupted sweep")
    p.add_argument("--address", help="join this Ray cluster (default: RAY_ADDRESS, else embedded)")


def _add_group(sub: argparse._SubParsersAction, group: str, help_text: str) -> None:
    # Command modules are imported only when their group runs, so one broken or slow optional
    # command cannot break or slow the others.
    p = sub.add_parser(group, help=help_text, description=help_text, add_help=False)
    p.add_argument("name", nargs="?", metavar="NAME", help=f"the {group} command")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="the command's own arguments")
    p.add_argument("-h", "--help", action="store_true", dest="group_help")


def _group_listing(group: str) -> str:
    lines = [f"usage: memrl {group} NAME [--help | ARGS ...]", "", f"{group} commands:"]
    for name in plugins.command_names(group):
        try:
            text = plugins.one_line_help(plugins.load_command(group, name))
        except Exception as err:  # noqa: BLE001  (list the command even if it cannot load)
            text = f"(unavailable: {type(err).__name__}: {err})"
        lines.append(f"  {name:<18} {text}")
    if len(lines) == 3:
        lines.append("  (none yet)")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memrl",
        description="Train, evaluate, sweep and benchmark memory-efficient RL agents "
        "(Memo, MEM1) on Ray RLlib.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_train(sub)
    _add_eval(sub)
    _add_tune(sub)
    _add_report(sub)
    _add_compare(sub)
    _add_export(sub)
    _add_group(sub, "bench", "benchmarks: print a table, write parquet + PNG")
    _add_group(sub, "serve", "services: retrieval server, WebShop site")
    _add_group(sub, "data", "build corpora, indexes, task sets and catalogues")
    return parser


def _cmd_train(args: argparse.Namespace) -> int:
    from memrl.experiment.config import load_config
    from memrl.experiment.interrupts import RunInterrupted
    from memrl.experiment.train import train

    overrides = list(args.overrides)
    if args.stop_iters is not None:
        overrides.append(f"run.stop_iters={args.stop_iters}")
    if args.stop_timesteps is not None:
        overrides.append(f"run.stop_timesteps={args.stop_timesteps}")
    exp = load_config(args.config, overrides)
    try:
        train(
            exp,
            run_dir=args.output,
            resume=args.resume,
            address=args.address,
            dashboard=args.dashboard,
        )
    except RunInterrupted as err:  # not the user's doing: no usage exit code, no traceback
        print(f"error: {err}", file=sys.stderr)
        return EXIT_INTERRUPTED
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    from memrl.experiment.evaluate import evaluate_checkpoint

    evaluate_checkpoint(
        args.checkpoint,
        episodes=args.episodes,
        output=args.output,
        overrides=args.overrides,
        explore=args.explore,
        replays=args.replays,
        eval_set=args.eval_set,
    )
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from memrl.experiment.run_report import report_at

    print(f"wrote {report_at(args.run_dir, args.output)}")
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from memrl.experiment.compare import compare_runs

    compare_runs(
        args.run_dirs,
        args.labels,
        output=args.output,
        metric=args.metric,
        points=args.points,
        as_json=args.json,
    )
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from memrl.experiment.export import export_checkpoint

    print(f"wrote {export_checkpoint(args.checkpoint, args.fmt, args.output)}")
    return 0


def _cmd_tune(args: argparse.Namespace) -> int:
    from memrl.experiment.tune import run_tune

    return run_tune(args)


def _cmd_group(args: argparse.Namespace) -> int:
    if not args.name or (args.group_help and not args.name):
        print(_group_listing(args.command))
        return 0 if args.group_help else EXIT_USAGE
    module = plugins.load_command(args.command, args.name)
    parser = argparse.ArgumentParser(
        prog=f"memrl {args.command} {args.name}",
        description=(module.__doc__ or "").strip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    module.add_arguments(parser)
    rest = list(args.rest) + (["--help"] if args.group_help else [])
    sub_args = parser.parse_args(rest)
    sub_args.command, sub_args.name = args.command, args.name
    return int(module.run(sub_args) or 0)


COMMANDS = {"report": _cmd_report, "compare": _cmd_compare, "export": _cmd_export}

_PATH_HINTS: dict[type[OSError], str] = {
    NotADirectoryError: " (a folder on that path is a file: give a path whose folders are "
    "folders or do not exist yet)",
    IsADirectoryError: " (a folder is where a file should be: give a file's path, or move the "
    "folder aside)",
    PermissionError: " (this user may not write or read there: give another path, e.g. "
    "another --output, or change the folder's permissions)",
}
"""What to do about a path error, by its kind (printed after the error's own message)."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.command == "bench":  # benchmarks run for minutes: their progress lines show by default
        logging.getLogger("memrl.bench").setLevel(logging.INFO)
    if not args.verbose:
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        # Ray's own deprecation notices are log records (RLlib logs one for every RLModule it
        # builds in a process): not the user's to act on, and not above an `error:` line.
        logging.getLogger("ray._common.deprecation").setLevel(logging.ERROR)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        if args.command == "train":
            return _cmd_train(args)
        if args.command == "eval":
            return _cmd_eval(args)
        if args.command == "tune":
            return _cmd_tune(args)
        if args.command in COMMANDS:
            return COMMANDS[args.command](args)
        return _cmd_group(args)
    except (ValueError, TypeError, FileNotFoundError, NotImplementedError) as err:
        if os.environ.get("MEMRL_DEBUG"):
            traceback.print_exc()
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except (NotADirectoryError, IsADirectoryError, PermissionError, FileExistsError) as err:
        # e.g. --output a/b where a is a file, or a folder this user may not write to
        if os.environ.get("MEMRL_DEBUG"):
            traceback.print_exc()
        print(f"error: {err}{_PATH_HINTS.get(type(err), '')}", file=sys.stderr)
        return EXIT_USAGE
    except ImportError as err:
        hint = str(err) if "memrl[" in str(err) else missing_extra(err)
        if hint is None:
            raise
        if os.environ.get("MEMRL_DEBUG"):
            traceback.print_exc()
        print(f"error: {hint}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(
            "interrupted; checkpoints and metrics written so far are kept (continue with --resume)",
            file=sys.stderr,
        )
        return 130


if __name__ == "__main__":
    sys.exit(main())
