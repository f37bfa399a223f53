"""Experiment YAML -> typed settings -> an RLlib ``AlgorithmConfig`` (new API stack).

An experiment file has these sections, each mapped 1:1 onto a frozen dataclass (unknown keys are
errors that name the key and list the allowed ones):

```yaml
name: quickstart            # run name; outputs go to <run.output_dir>/<name>
env: {id: memrl/DarkKeyToDoor-v0, config: {size: 5}}
algorithm: {name: ppo, lr: 3.0e-4, ...}      # `name` picks the settings class (ALGORITHMS)
model: {type: lstm, lstm_cell_size: 64, ...}  # `type` picks the settings class (MODELS)
resources: {num_env_runners: 1, ...}
fault_tolerance: {restart_failed_env_runners: true, ...}
run: {stop_iters: 50, checkpoint_every: 5, ...}
tune: {...}                 # only read by `memrl tune` (memrl/experiment/tune.py)
```

``algorithm`` and ``model`` are tagged: the tag selects a settings class from a registry of
"module:Class" strings, so new algorithms and networks plug in without touching this file's logic.
A model settings class implements ``apply(algo_config, experiment)``; an algorithm settings class
implements ``make_algorithm_config(experiment) -> AlgorithmConfig``.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from memrl.experiment.dataclass_dicts import coerce, from_dict, to_dict

ALGORITHMS: dict[str, str] = {
    "ppo": "memrl.methods.ppo:PPOSettings",
    "mem1": "memrl.methods.mem1.settings:Mem1Settings",
}
"""algorithm.name -> settings class."""

MODELS: dict[str, str] = {
    "mlp": "memrl.methods.baselines:MLPModel",
    "lstm": "memrl.methods.baselines:LSTMModel",
    "memo": "memrl.methods.memo.settings:MemoModelSettings",
    "llm": "memrl.methods.mem1.settings:LLMModelSettings",
}
"""model.type -> settings class."""


@dataclass(frozen=True)
class FaultInjection:
    """Deliberate env faults, for testing a run's fault tolerance (off by default)."""

    step_error_probability: float = 0.0
    """Probability that an env step raises RuntimeError."""
    env_runner_indices: list[int] = field(default_factory=lambda: [1])
    """Env runners (by worker_index; 0 is the local one) whose envs may raise."""

    def validate(self, where: str) -> None:
        if not 0.0 <= self.step_error_probability <= 1.0:
            raise ValueError(
                f"{where}.step_error_probability must be in [0, 1], "
                f"got {self.step_error_probability}"
            )


@dataclass(frozen=True)
class EnvSettings:
    """Which environment, with which constructor arguments."""

    id: str = "memrl/DarkKeyToDoor-v0"
    """A gymnasium id (memrl's are listed in memrl.envs.ENV_ENTRY_POINTS)."""
    config: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the env's constructor."""
    fault_injection: FaultInjection = field(default_factory=FaultInjection)
    """Deliberate faults for fault-tolerance tests."""
    normalize_actions: bool | None = None
    """RLlib's action unsquashing/clipping connector (it matters for Box action spaces only).
    null: off for memrl's own envs, whose actions are discrete (on, it deep-copies every action
    batch for nothing: ~10% of sampling time), RLlib's default (on) for any other env."""


@dataclass(frozen=True)
class ResourceSettings:
    """How the run spreads over Ray: env runners, learners, and what each one asks for."""

    num_env_runners: int = 0
    """Remote env runner actors (0: sample in the driver process, the fastest on one small
    machine; on a cluster, one or more per env-runner node)."""
    num_envs_per_env_runner: int = 256
    """Envs each runner steps together: with a native vectorized env, the main lever of sampling
    speed (256 keeps ~2x more of the raw env speed than 64, 10x more than RLlib's 8; `memrl bench
    scaling`, docs/clusters.md). Heavy envs (browsers, Habitat, LLM text envs) set their own."""
    env_vectorize_mode: Literal["auto", "vector", "sync", "async"] = "auto"
    """vector: the env's native vectorized version (array ops over all envs; see
    memrl.envs.VECTOR_ENTRY_POINTS); sync: a runner's envs step one by one in its process; async:
    one subprocess per env (heavy envs); auto: vector where the env has one (and no fault
    injection is set), else sync."""
    sampler: Literal["auto", "bulk", "episodes"] = "auto"
    """bulk: env runners write whole rollouts into flat (T, N) arrays and the learner trains on
    them directly (memrl.rollout: PPO, a model that supports it, vector or sync stepping, at
    most one learner); episodes: RLlib's per-env episode objects and learner connectors; auto:
    bulk where it applies and the env has a native vector form, else episodes."""
    overlap_sampling: bool = False
    """Memo on the bulk path: the env runners sample the next batch while the learner trains
    on this one (remote runners in their own processes; with num_env_runners 0, a thread of the
    driver), so acting and learning can use a core each; every batch is then acted one weight
    version behind the learner, which trains it with decoupled PPO (docs/clusters.md)."""
    num_cpus_per_env_runner: float = 1.0
    """CPUs each env runner reserves."""
    num_gpus_per_env_runner: float = 0.0
    """GPUs each env runner reserves (LLM generation, rendering)."""
    custom_resources_per_env_runner: dict[str, float] = field(default_factory=dict)
    """Custom Ray resources per env runner, to pin runners to node types (e.g. {habitat: 1})."""
    num_learners: int = 0
    """Remote learner actors (0: one learner in the driver; >1: DDP)."""
    num_gpus_per_learner: float = 0.0
    """GPUs per learner (the driver's learner when num_learners is 0)."""
    num_cpus_per_learner: float = 1.0
    """CPUs per remote learner."""
    custom_resources_per_learner: dict[str, float] = field(default_factory=dict)
    """Custom Ray resources per learner, to pin learners to node types (e.g. {learner: 1})."""
    num_cpus_for_main_process: float = 1.0
    """CPUs the driver (the Algorithm) reserves when it runs as a Tune trial."""
    placement_strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = "PACK"
    """How a Tune trial's bundles (driver, runners, learners) are placed on nodes."""
    rollout_fragment_length: int | str = "auto"
    """Steps per env per sample() call; "auto" derives it from the train batch size."""
    sample_timeout_s: float = 120.0
    """How long the algorithm waits for one sample() round before it gives up on a runner."""

    def validate(self, where: str) -> None:
        for name in ("num_env_runners", "num_learners"):
            if getattr(self, name) < 0:
                raise ValueError(f"{where}.{name} must be >= 0, got {getattr(self, name)}")
        if self.num_envs_per_env_runner < 1:
            raise ValueError(
                f"{where}.num_envs_per_env_runner must be >= 1, got {self.num_envs_per_env_runner}"
            )
        if self.overlap_sampling and self.sampler == "episodes":
            raise ValueError(
                f"{where}.overlap_sampling runs on the bulk path: it needs sampler 'auto' or "
                f"'bulk' (got {self.sampler!r}); turn overlap_sampling off otherwise"
            )
        frag = self.rollout_fragment_length
        if isinstance(frag, str) and frag != "auto" or isinstance(frag, int) and frag < 1:
            raise ValueError(
                f"{where}.rollout_fragment_length must be 'auto' or an int >= 1, got {frag!r}"
            )


@dataclass(frozen=True)
class FaultToleranceSettings:
    """What happens when an env or an env runner fails (RLlib's fault-tolerance settings)."""

    restart_failed_env_runners: bool = True
    """Bring a crashed env runner back (the run goes on with the others meanwhile)."""
    max_num_env_runner_restarts: int = 1000
    """Restarts allowed per env runner over the whole run."""
    delay_between_env_runner_restarts_s: float = 1.0
    """Pause before a restart, so a crash loop does not spin."""
    restart_failed_sub_environments: bool = True
    """Recreate a failing env inside its runner (counted as env_step_failures) instead of failing
    the runner; with false, a remote runner whose env raises is restarted as a whole, and an env
    error in the driver's own runner (num_env_runners 0) ends the run."""
    num_consecutive_env_runner_failures_tolerance: int = 100
    """Consecutive failed sample rounds after which the run stops."""
    env_runner_health_probe_timeout_s: float = 30.0
    """Time given to a restarted runner to answer its health probe."""


@dataclass(frozen=True)
class RunSettings:
    """When to stop, where outputs go, how often to checkpoint."""

    stop_iters: int = 50
    """Training iterations (0: no limit)."""
    stop_timesteps: int = 0
    """Sampled env steps after which training stops (0: no limit)."""
    stop_seconds: float = 0.0
    """Training time in seconds (sampling and learning, summed over resumes) after which training
    stops (0: no limit): equal wall budgets when runs are compared."""
    checkpoint_every: int = 5
    """Checkpoint every N iterations (and always at the end)."""
    keep_checkpoints: int = 3
    """Newest checkpoints kept on disk (older ones are deleted)."""
    output_dir: str = "runs"
    """Runs go to <output_dir>/<name> (with run.storage set: only what this machine alone needs,
    TensorBoard's files before they are copied and RLlib's logdir)."""
    storage: str | None = None
    """Where runs go instead, as <storage>/<name>: a directory on shared storage or a URI of a
    pyarrow filesystem (file:///mnt/shared/runs, s3://bucket/runs, gs://bucket/runs). On a
    cluster, a job on any node can then --resume the run (null: output_dir)."""
    seed: int = 0
    """Seed of the algorithm, env runners and envs."""
    eval_episodes: int = 10
    """Episodes `memrl eval` runs by default."""
    loggers: list[Literal["tensorboard", "wandb", "mlflow"]] = field(
        default_factory=lambda: ["tensorboard"]
    )
    """Where metrics go besides metrics.parquet: tensorboard (<run>/tb), wandb (Weights & Biases;
    WANDB_MODE=offline keeps it local), mlflow (MLFLOW_TRACKING_URI, else a file store in
    <run>/mlruns). wandb and mlflow need the `loggers` extra (memrl/experiment/loggers.py)."""

    def validate(self, where: str) -> None:
        if len(set(self.loggers)) != len(self.loggers):
            raise ValueError(f"{where}.loggers names a logger twice: {self.loggers}")
        for name in ("stop_iters", "stop_timesteps", "stop_seconds"):
            if getattr(self, name) < 0:
                raise ValueError(f"{where}.{name} must be >= 0, got {getattr(self, name)}")
        if self.checkpoint_every < 1 or self.keep_checkpoints < 1:
            raise ValueError(f"{where}.checkpoint_every and {where}.keep_checkpoints must be >= 1")
        if self.storage is not None and not _STORAGE.match(self.storage):
            raise ValueError(
                f"{where}.storage must be a directory or a URI such as s3://bucket/runs, "
                f"gs://bucket/runs or file:///mnt/shared/runs, got {self.storage!r}"
            )


_STORAGE = re.compile(r"^(?:[a-zA-Z][a-zA-Z0-9+.-]*://.+|[^:]+)$")
"""A path without a colon, or scheme://something."""


@dataclass(frozen=True)
class ExperimentConfig:
    """A whole experiment: what `memrl train` runs and writes into the run's config.yaml."""

    name: str = "experiment"
    """Run name."""
    env: EnvSettings = field(default_factory=EnvSettings)
    """The environment."""
    algorithm: Any = None
    """Algorithm settings (tagged by `name`, see ALGORITHMS)."""
    model: Any = None
    """Model settings (tagged by `type`, see MODELS)."""
    resources: ResourceSettings = field(default_factory=ResourceSettings)
    """Env runners, learners and their resources."""
    fault_tolerance: FaultToleranceSettings = field(default_factory=FaultToleranceSettings)
    """Env runner and env failure handling."""
    run: RunSettings = field(default_factory=RunSettings)
    """Stopping, checkpoints, outputs, seed."""
    tune: dict[str, Any] | None = None
    """Search space, scheduler and trial settings for `memrl tune` (see tune_space.py)."""

    @property
    def run_dir(self) -> Path:
        return Path(self.run.output_dir) / self.name

    def located(self, run_dir: str | os.PathLike[str]) -> ExperimentConfig:
        """The same experiment with ``run_dir`` as its run directory (``--output``, or a run
        directory moved since), so files a method keeps with the run land there."""
        path = Path(run_dir)
        return dataclasses.replace(
            self, name=path.name, run=dataclasses.replace(self.run, output_dir=str(path.parent))
        )

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)


def _resolve(registry: dict[str, str], tag: str, kind: str, key: str) -> type:
    if tag not in registry:
        raise ValueError(f"Unknown {key} {tag!r}. Available: {sorted(registry)}")
    module_name, cls_name = registry[tag].split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        raise ValueError(f"{key} {tag!r} is not available in this install ({err})") from err
    return getattr(module, cls_name)


def _tagged(data: Any, registry: dict[str, str], tag_key: str, default: str, where: str) -> Any:
    if data is None:
        data = {}
    if dataclasses.is_dataclass(data):
        return data
    if not isinstance(data, dict):
        raise TypeError(f"{where} must be a mapping with a {tag_key!r} key, got {data!r}")
    data = dict(data)
    tag = data.pop(tag_key, default)
    cls = _resolve(registry, tag, where, f"{where}.{tag_key}")
    return from_dict(cls, data, where)


def parse_config(data: dict[str, Any]) -> ExperimentConfig:
    """Validates a config dict (as read from YAML) into an ExperimentConfig."""
    if not isinstance(data, dict):
        raise TypeError(f"An experiment config must be a mapping, got {type(data).__name__}")
    data = dict(data)
    algorithm = _tagged(data.pop("algorithm", None), ALGORITHMS, "name", "ppo", "algorithm")
    model = _tagged(data.pop("model", None), MODELS, "type", "mlp", "model")
    exp = from_dict(ExperimentConfig, data, "")
    exp = dataclasses.replace(exp, algorithm=algorithm, model=model)
    if not exp.name or "/" in exp.name or exp.name.startswith("."):
        raise ValueError(f"name must be a plain directory name, got {exp.name!r}")
    return exp


class _ConfigLoader(yaml.SafeLoader):
    """YAML 1.1 as PyYAML reads it, plus floats written without a dot or an exponent sign
    (``1e-4``, ``3e5``, ``1.5e3``): YAML 1.1 reads those as strings, so ``lr: 1e-4`` or
    ``--set algorithm.lr=1e-4`` would fail validation with "must be a number"."""


_ConfigLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


MAX_YAML_VALUES = 100_000
"""Most values a config may hold once its aliases are expanded (each use of ``*name`` counts its
anchor's values again): configs hold hundreds; a few lines of nested aliases can hold billions."""
MAX_YAML_DEPTH = 100
"""Deepest nesting of mappings and lists a config may have."""


def parse_yaml(text: str) -> Any:
    """A config's YAML text as Python data (``1e-4`` is a float, as a user means it).

    Raises:
        ValueError: the text is not YAML (the message is one line: the problem and where), an
            alias refers to a node that contains it, aliases expand to more than
            ``MAX_YAML_VALUES`` values, or nesting goes deeper than ``MAX_YAML_DEPTH``.
    """
    loader = _ConfigLoader(text)  # a SafeLoader: no arbitrary objects
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node)
        return loader.construct_document(node)
    except yaml.YAMLError as err:
        raise ValueError(f"not valid YAML: {yaml_problem(err)}") from None
    except RecursionError:
        raise ValueError(
            f"YAML nested too deeply (a config needs at most {MAX_YAML_DEPTH} levels)"
        ) from None
    finally:
        loader.dispose()


def yaml_problem(err: yaml.YAMLError) -> str:
    """One line for a YAML error: the problem, where it is, and its context."""
    if not isinstance(err, yaml.MarkedYAMLError) or err.problem is None:
        return " ".join(str(err).split())
    text = err.problem
    if err.problem_mark is not None:
        text += f" at line {err.problem_mark.line + 1}, column {err.problem_mark.column + 1}"
    if err.context:
        where = err.context_mark
        started = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
        text += f" ({err.context}{started})"
    return text


def _check_expansion(root: yaml.Node) -> None:
    """Refuses alias cycles, alias bombs and deep nesting before anything is constructed.

    Counts the values of the node graph as if every alias were written out (each shared node's
    count is computed once), without recursion, so no input can exhaust the stack here.
    """
    size: dict[int, int] = {}
    open_: set[int] = set()  # nodes whose values are being counted (the current path)
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 0, False)]
    while stack:
        node, depth, counted = stack.pop()
        children = _children(node)
        if counted:
            open_.discard(id(node))
            size[id(node)] = 1 + sum(size[id(c)] for c in children)
            if size[id(node)] > MAX_YAML_VALUES:
                raise ValueError(
                    f"YAML aliases expand to more than {MAX_YAML_VALUES:,} values (line "
                    f"{node.start_mark.line + 1}); write the values out or nest fewer aliases"
                )
            continue
        if id(node) in size:
            continue
        if depth > MAX_YAML_DEPTH:
            raise ValueError(
                f"YAML nested deeper than {MAX_YAML_DEPTH} levels (line {node.start_mark.line + 1})"
            )
        open_.add(id(node))
        stack.append((node, depth, True))
        for child in children:
            if id(child) in open_:
                raise ValueError(
                    f"a YAML alias at line {child.start_mark.line + 1} refers to a node that "
                    f"contains it (line {node.start_mark.line + 1}): a cycle; an anchor may be "
                    "reused, not nested inside itself"
                )
            stack.append((child, depth + 1, False))


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Applies ``key.path=value`` overrides (values parsed as YAML) to a config dict."""
    data = _deep_copy(data)
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"--set expects key.path=value, got {item!r}")
        path, raw = item.split("=", 1)
        keys = path.strip().split(".")
        if not all(keys):
            raise ValueError(f"--set key path {path!r} has an empty part")
        try:
            value = parse_yaml(raw)
        except ValueError as err:
            raise ValueError(f"--set {path}: cannot parse value {raw[:100]!r} ({err})") from None
        node = data
        for k in keys[:-1]:
            child = node.get(k)
            if child is None:
                child = node[k] = {}
            if not isinstance(child, dict):
                raise ValueError(f"--set {path}: {k} is not a mapping (it is {child!r})")
            node = child
        node[keys[-1]] = value
    return data


def load_config(
    path: str | os.PathLike[str], overrides: list[str] | None = None
) -> ExperimentConfig:
    """Reads an experiment YAML, applies ``--set`` overrides and validates the result.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError / TypeError: the YAML is malformed or a key or value is not allowed.
    """
    data = load_yaml(path)
    data = apply_overrides(data, overrides or [])
    data.setdefault("name", Path(path).stem)
    return parse_config(data)


def load_yaml(path: str | os.PathLike[str]) -> dict[str, Any]:
    p = Path(path)
    if p.is_dir():
        configs = sorted(str(c) for c in p.glob("*.yaml"))
        raise ValueError(
            f"{str(p)!r} is a directory, not a config file; give one of its files"
            + (f", e.g. {', '.join(configs)}" if configs else "")
        )
    if not p.is_file():
        hint = ""
        configs = Path("configs")
        if configs.is_dir():
            hint = f" Configs here: {sorted(str(c) for c in configs.glob('*.yaml'))}"
        raise FileNotFoundError(f"Config file {str(p)!r} not found.{hint}")
    try:
        data = parse_yaml(p.read_text())
    except ValueError as err:
        raise ValueError(f"{p}: {err}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ValueError(f"{p} must hold a mapping at the top level, got {type(data).__name__}")
    return data


def _deep_copy(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _deep_copy(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_deep_copy(v) for v in data]
    return data


__all__ = [
    "ALGORITHMS",
    "MODELS",
    "EnvSettings",
    "ExperimentConfig",
    "FaultInjection",
    "FaultToleranceSettings",
    "ResourceSettings",
    "RunSettings",
    "apply_overrides",
    "coerce",
    "load_config",
    "parse_config",
]
