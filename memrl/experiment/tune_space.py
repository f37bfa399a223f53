"""The ``tune:`` section of an experiment config: search space, scheduler and sweep settings.

``parse_tune_settings`` validates it into ``TuneSettings`` (errors name the key); ``memrl tune``
(tune.py) turns it into a Ray Tune sweep. See tune.py's docstring for the YAML.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from memrl.experiment.dataclass_dicts import from_dict

if TYPE_CHECKING:
    from memrl.experiment.config import ExperimentConfig

SEARCH_KINDS = ("grid", "choice", "uniform", "loguniform")
"""How a search-space key is sampled: every value (grid), one of the values (choice), or a float
drawn from [low, high] uniformly or log-uniformly."""


@dataclass(frozen=True)
class SearchDimension:
    """One key of the search space: an experiment-config path and how its value is drawn."""

    key: str
    """Dotted experiment-config path, as for --set (e.g. model.l_sum)."""
    kind: str
    """One of SEARCH_KINDS."""
    values: tuple[Any, ...]
    """grid/choice: the values; uniform/loguniform: (low, high)."""

    @classmethod
    def parse(cls, key: str, spec: Any) -> SearchDimension:
        where = f"tune.search_space.{key}"
        example = (
            "{grid: [2, 4]}, {choice: [a, b]}, {uniform: [0.9, 0.99]}, {loguniform: [1e-4, 1e-2]}"
        )
        if not isinstance(spec, dict) or len(spec) != 1:
            raise ValueError(
                f"{where} must be a mapping with exactly one of {list(SEARCH_KINDS)}, got "
                f"{spec!r}. Examples: {example}"
            )
        ((kind, values),) = spec.items()
        if kind not in SEARCH_KINDS:
            raise ValueError(
                f"{where}: unknown kind {kind!r}. Allowed: {list(SEARCH_KINDS)} (e.g. {example})"
            )
        if not isinstance(values, list) or not values:
            raise ValueError(f"{where}.{kind} must be a non-empty list, got {values!r}")
        if kind in ("uniform", "loguniform"):
            if len(values) != 2 or not all(
                isinstance(v, int | float) and not isinstance(v, bool) for v in values
            ):
                raise ValueError(f"{where}.{kind} must be [low, high] numbers, got {values!r}")
            low, high = float(values[0]), float(values[1])
            if not low < high:
                raise ValueError(f"{where}.{kind} needs low < high, got [{low}, {high}]")
            if kind == "loguniform" and low <= 0:
                raise ValueError(f"{where}.loguniform needs low > 0, got {low}")
            values = [low, high]
        return cls(key, kind, tuple(values))

    def example(self) -> Any:
        """A value this dimension can take (to check the key against the config early)."""
        if self.kind in ("grid", "choice"):
            return self.values[0]
        return (
            self.values[0] if self.kind == "uniform" else math.sqrt(self.values[0] * self.values[1])
        )

    def to_tune(self) -> Any:
        from ray import tune

        values = list(self.values)
        if self.kind == "grid":
            return tune.grid_search(values)
        if self.kind == "choice":
            return tune.choice(values)
        if self.kind == "uniform":
            return tune.uniform(*values)
        return tune.loguniform(*values)


@dataclass(frozen=True)
class FIFOSettings:
    """No scheduler: every trial runs to the stop criteria."""

    TAG_KEY: ClassVar[tuple[str, str]] = ("type", "fifo")

    def make(self, tune_settings: TuneSettings, exp: ExperimentConfig) -> Any:
        return None


@dataclass(frozen=True)
class ASHASettings:
    """Asynchronous successive halving: stops the worse trials at rungs grace_period * rf^k."""

    TAG_KEY: ClassVar[tuple[str, str]] = ("type", "asha")

    time_attr: str = "training_iteration"
    """What the rungs count (a result column that grows: training_iteration, env_steps_sampled)."""
    max_t: int | None = None
    """Longest a trial runs, in time_attr units (null: run.stop_iters)."""
    grace_period: int = 1
    """Least a trial runs before it can be stopped."""
    reduction_factor: float = 4.0
    """1/reduction_factor of the trials go on at each rung."""
    brackets: int = 1
    """Number of brackets (different grace periods)."""

    def validate(self, where: str) -> None:
        if self.grace_period < 1 or self.reduction_factor <= 1 or self.brackets < 1:
            raise ValueError(
                f"{where}: grace_period and brackets must be >= 1 and reduction_factor > 1, got "
                f"{self.grace_period}, {self.brackets}, {self.reduction_factor}"
            )

    def make(self, tune_settings: TuneSettings, exp: ExperimentConfig) -> Any:
        from ray.tune.schedulers import ASHAScheduler

        max_t = self.max_t or exp.run.stop_iters
        if not max_t:
            raise ValueError(
                "tune.scheduler.max_t is needed when run.stop_iters is 0 (no iteration limit)"
            )
        if max_t < self.grace_period:
            raise ValueError(
                f"tune.scheduler.max_t ({max_t}) must be >= grace_period ({self.grace_period})"
            )
        return ASHAScheduler(
            time_attr=self.time_attr,
            max_t=max_t,
            grace_period=self.grace_period,
            reduction_factor=self.reduction_factor,
            brackets=self.brackets,
        )


@dataclass(frozen=True)
class PBTSettings:
    """Population-based training: every perturbation_interval, the worst trials copy the best
    ones' checkpoints and continue with mutated hyperparameters."""

    TAG_KEY: ClassVar[tuple[str, str]] = ("type", "pbt")

    time_attr: str = "training_iteration"
    """What perturbation_interval counts."""
    perturbation_interval: int = 4
    """How often (in time_attr units) trials are compared and perturbed."""
    quantile_fraction: float = 0.25
    """Fraction of trials that copy from / are copied by others."""
    resample_probability: float = 0.25
    """Probability of resampling a value from its search-space range instead of scaling it."""
    mutate: list[str] | None = None
    """Search-space keys PBT changes (null: every key that is not a grid)."""

    def validate(self, where: str) -> None:
        if self.perturbation_interval < 1:
            raise ValueError(f"{where}.perturbation_interval must be >= 1")
        if not 0 < self.quantile_fraction <= 0.5:
            raise ValueError(f"{where}.quantile_fraction must be in (0, 0.5]")

    def make(self, tune_settings: TuneSettings, exp: ExperimentConfig) -> Any:
        from ray.tune.schedulers import PopulationBasedTraining

        dims = {d.key: d for d in tune_settings.dimensions()}
        keys = (
            self.mutate
            if self.mutate is not None
            else [k for k, d in dims.items() if d.kind != "grid"]
        )
        unknown = [k for k in keys if k not in dims]
        if unknown:
            raise ValueError(
                f"tune.scheduler.mutate names {unknown}, which are not in tune.search_space "
                f"({sorted(dims)})"
            )
        if not keys:
            raise ValueError(
                "tune.scheduler (pbt) has nothing to mutate: add a choice/uniform/loguniform key "
                "to tune.search_space or list keys in tune.scheduler.mutate"
            )
        mutations: dict[str, Any] = {}
        for key in keys:
            set_path(mutations, key, dims[key].to_tune())
        return PopulationBasedTraining(
            time_attr=self.time_attr,
            perturbation_interval=self.perturbation_interval,
            quantile_fraction=self.quantile_fraction,
            resample_probability=self.resample_probability,
            hyperparam_mutations=mutations,
        )


SCHEDULERS: dict[str, type] = {"fifo": FIFOSettings, "asha": ASHASettings, "pbt": PBTSettings}
"""tune.scheduler.type -> settings class."""


@dataclass(frozen=True)
class TuneSettings:
    """The `tune:` section of an experiment config."""

    search_space: dict[str, Any]
    """Dotted config key -> {grid|choice|uniform|loguniform: ...} (see SearchDimension)."""
    metric: str = "episode_return_mean"
    """The result column trials are ranked by (any column of memrl's metrics rows)."""
    mode: Literal["max", "min"] = "max"
    """Whether a larger or a smaller metric is better."""
    num_samples: int = 1
    """Samples of the random dimensions; each is crossed with every grid point."""
    max_concurrent_trials: int = 0
    """Trials running at once (0: as many as the resources allow)."""
    scheduler: Any = None
    """{type: fifo|asha|pbt, ...} (default fifo)."""
    checkpoint_every: int | None = None
    """Checkpoint each trial every N iterations (null: run.checkpoint_every; pbt: its interval)."""
    keep_checkpoints: int = 2
    """Newest checkpoints kept per trial."""
    max_failures: int = 0
    """Times a failed trial is restarted from its last checkpoint."""

    def validate(self, where: str) -> None:
        if not self.search_space:
            raise ValueError(f"{where}.search_space is empty: add at least one key to sweep")
        self.dimensions()
        if self.num_samples < 1 or self.max_concurrent_trials < 0 or self.keep_checkpoints < 1:
            raise ValueError(
                f"{where}: num_samples and keep_checkpoints must be >= 1 and "
                f"max_concurrent_trials >= 0, got {self.num_samples}, {self.keep_checkpoints}, "
                f"{self.max_concurrent_trials}"
            )
        if self.checkpoint_every is not None and self.checkpoint_every < 1:
            raise ValueError(f"{where}.checkpoint_every must be null or >= 1")

    def num_trials(self) -> int:
        """Trials of the whole sweep: num_samples x every grid point."""
        return self.num_samples * math.prod(
            len(d.values) for d in self.dimensions() if d.kind == "grid"
        )

    def dimensions(self) -> list[SearchDimension]:
        return [SearchDimension.parse(k, v) for k, v in self.search_space.items()]

    def param_space(self) -> dict[str, Any]:
        """Tune's nested param space (model.l_sum -> {"model": {"l_sum": ...}})."""
        space: dict[str, Any] = {}
        for dim in self.dimensions():
            set_path(space, dim.key, dim.to_tune())
        return space


def parse_tune_settings(data: Any) -> TuneSettings:
    """Validates the `tune:` section into TuneSettings (errors name the key)."""
    if data is None:
        raise ValueError(
            "the config has no tune: section. Add one with a search_space, e.g.\n"
            "tune:\n  metric: episode_return_mean\n  mode: max\n  search_space:\n"
            "    algorithm.lr: {loguniform: [1.0e-4, 1.0e-3]}\n"
            "(see configs/tune_memo_key_door.yaml and docs/tune.md)"
        )
    if not isinstance(data, dict):
        raise TypeError(f"tune must be a mapping, got {data!r}")
    data = dict(data)
    sched = data.pop("scheduler", None) or {"type": "fifo"}
    if not isinstance(sched, dict):
        raise TypeError(f"tune.scheduler must be a mapping with a type, got {sched!r}")
    sched = dict(sched)
    kind = sched.pop("type", "fifo")
    if kind not in SCHEDULERS:
        raise ValueError(f"Unknown tune.scheduler.type {kind!r}. Available: {sorted(SCHEDULERS)}")
    scheduler = from_dict(SCHEDULERS[kind], sched, "tune.scheduler")
    settings = from_dict(TuneSettings, data, "tune")
    return dataclasses.replace(settings, scheduler=scheduler)


def set_path(tree: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = tree
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    node[keys[-1]] = value


def flat_items(tree: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    items: list[tuple[str, Any]] = []
    for k, v in tree.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            items += flat_items(v, key + ".")
        else:
            items.append((key, v))
    return items
