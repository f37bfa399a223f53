"""A checkpoint checked before it is used: its files whole, its policy module the one the run's
config builds.

RLlib restores an RLModule's weights with ``load_state_dict(strict=False)``: a weight the module
does not have is dropped and one the checkpoint lacks keeps its random initial value, without a
word, so an MLP checkpoint restored into a Memo run would act with random weights. ``memrl
eval``, ``memrl train --resume`` and ``memrl export`` therefore call ``check_checkpoint`` before
anything is restored: it compares the checkpoint's policy module (its class and spaces from
``class_and_ctor_args.pkl``, the names and shapes of its weights from ``module_state.pkl``, read
without the weights: see state_files.py) with the module the run's config builds, and refuses
any difference with one ``CheckpointMismatch`` that lists them. That module is built on PyTorch's
meta device (shapes, no data); one that loads its weights while it is built (a Hugging Face LM,
whose ``from_pretrained`` refuses the meta device) is built on the CPU.

``intact_checkpoint`` picks the checkpoint to use: every state file in it must decode
(``DamagedCheckpoint`` names the first that does not); when a run's newest checkpoint is damaged,
the newest intact one before it is used, and a line says so.
"""

from __future__ import annotations

import json
import logging
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memrl.experiment.run_dir import CHECKPOINTS, POLICY_MODULE, STATE_FILE, RunDir
from memrl.experiment.state_files import read_structure, weight_shapes

logger = logging.getLogger(__name__)

SHOWN = 3
"""Weight names shown per kind of difference (the message gives the count of the rest)."""


class DamagedCheckpoint(ValueError):
    """A file of a checkpoint is missing, empty, a folder, cut short or corrupt."""


class CheckpointMismatch(ValueError):
    """A checkpoint's policy module is not the one the run's config builds."""


@dataclass(frozen=True)
class CheckpointModule:
    """A checkpoint's policy module, as far as a restore into another module cares."""

    module_class: str
    """The RLModule's class, with its module path."""
    observation_space: Any
    """The module's observation space (after the env-to-module connectors)."""
    action_space: Any
    """The module's action space."""
    weights: dict[str, tuple[int, ...] | None]
    """Each weight's name (a ``state_dict`` key) and shape (None: not known)."""


def _module_files() -> tuple[str, str]:
    """The class and state files of an RLModule checkpoint, as RLlib names them."""
    from ray.rllib.core.rl_module.rl_module import RLModule

    return RLModule.CLASS_AND_CTOR_ARGS_FILE_NAME, f"{RLModule.STATE_FILE_NAME}.pkl"


def check_files(checkpoint: Path, shown: str) -> None:
    """Raises DamagedCheckpoint naming the first file of the checkpoint that is missing (the
    state file, the policy module's class and state), a folder, empty, cut short or corrupt.

    ``shown``: the checkpoint as the user knows it (a URI run's, not its local copy).
    """
    class_file, state_file = _module_files()
    required = [STATE_FILE, f"{POLICY_MODULE}/{class_file}", f"{POLICY_MODULE}/{state_file}"]
    found = sorted(
        p.relative_to(checkpoint).as_posix()
        for p in checkpoint.rglob("*")
        if p.suffix in (".pkl", ".json")
    )
    for rel in dict.fromkeys(required + found):
        path = checkpoint / rel
        try:
            if rel.endswith(".json") and path.is_file():
                json.loads(path.read_text())
            else:
                read_structure(path)
        except ValueError as err:  # a JSONDecodeError or UnicodeDecodeError is one too
            problem = str(err) if rel.endswith(".pkl") else f"is not valid JSON ({err})"
            raise DamagedCheckpoint(f"{shown}/{rel} {problem}: the checkpoint is damaged") from None


def checkpoint_module(checkpoint: Path, shown: str) -> CheckpointModule:
    """What a checkpoint's policy module is (its files checked by ``check_files`` first).

    Raises:
        DamagedCheckpoint: a file of the checkpoint cannot be read.
        CheckpointMismatch: the module's class cannot be imported here.
    """
    check_files(checkpoint, shown)
    class_file, state_file = _module_files()
    module = checkpoint / POLICY_MODULE
    try:
        with open(module / class_file, "rb") as f:
            ctor = pickle.load(f)
    except (ImportError, AttributeError) as err:
        raise CheckpointMismatch(
            f"{shown}/{POLICY_MODULE}/{class_file} names a module class that this memrl does "
            f"not have ({err}); use it with the memrl version that trained it"
        ) from None
    try:
        cls = ctor["class"]
        kwargs = ctor["ctor_args_and_kwargs"][1]
        spaces = kwargs["observation_space"], kwargs["action_space"]
    except (KeyError, IndexError, TypeError) as err:
        raise DamagedCheckpoint(
            f"{shown}/{POLICY_MODULE}/{class_file} lacks the module's class or spaces ({err!r}): "
            "the checkpoint is damaged"
        ) from None
    return CheckpointModule(_class_name(cls), *spaces, weight_shapes(module / state_file))


def config_module(exp: Any, algo_config: Any) -> Any:
    """The policy module that ``algo_config`` (built from ``exp``) trains, on the meta device
    (shapes, no data). Its spaces are those of ``exp``'s env after the env-to-module
    connectors, as RLlib's env runners hand them to the learner."""
    import torch
    from ray.rllib.core import DEFAULT_MODULE_ID
    from ray.rllib.env import INPUT_ENV_SINGLE_SPACES, INPUT_ENV_SPACES

    from memrl.envs import make_env

    env = make_env(exp.env.id, exp.env.config)
    try:
        env_spaces = (env.observation_space, env.action_space)
    finally:
        env.close()
    pipeline = algo_config.build_env_to_module_connector(
        spaces={INPUT_ENV_SPACES: env_spaces, INPUT_ENV_SINGLE_SPACES: env_spaces}
    )
    spec = algo_config.get_rl_module_spec(
        spaces={DEFAULT_MODULE_ID: (pipeline.observation_space, env_spaces[1])},
        inference_only=False,
    )
    try:
        with torch.device("meta"):
            module = spec.build()
    except (RuntimeError, NotImplementedError) as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        logger.info("building %s on the CPU for the check (%s)", spec.module_class, reason)
        module = spec.build()
    return module.to("meta")  # also the tensors a module makes from data (on the CPU)


def _space(space: Any) -> str:
    """A space in a few words (a Box with per-dimension bounds by its shape and dtype)."""
    text = " ".join(str(space).split())
    if len(text) <= 80:
        return text
    shape, dtype = getattr(space, "shape", None), getattr(space, "dtype", None)
    if shape is None:
        return type(space).__name__
    return f"{type(space).__name__}(shape={shape}, dtype={dtype})"


def _class_name(cls: Any) -> str:
    return f"{getattr(cls, '__module__', '?')}.{getattr(cls, '__qualname__', cls)}"


def differences(found: CheckpointModule, module: Any) -> list[str]:
    """How a checkpoint's module (``found``) differs from ``module`` (the config's, on the meta
    device), one phrase each; empty when its weights load in full.

    The weights are loaded as RLlib's restore loads them (``load_state_dict``, strict=False),
    as meta tensors of their shapes, so the module's own upgrades of older names apply (e.g.
    Memo's separate q/k/v projections into a fused one). A difference is a weight of
    ``module`` the checkpoint lacks (it would keep its random value), one of the checkpoint
    that ``module`` lacks (it would be dropped) or one of another shape. A buffer the checkpoint
    lacks (a constant, or a running statistic that memrl added since) keeps its initial value,
    as the module's own upgrades intend.
    """
    import torch

    out = []
    if found.module_class != _class_name(type(module)):
        out.append(f"module class {found.module_class} (config: {_class_name(type(module))})")
    for what, mine, theirs in (
        ("observation space", found.observation_space, module.observation_space),
        ("action space", found.action_space, module.action_space),
    ):
        if mine != theirs:
            out.append(f"{what} {_space(mine)} (config: {_space(theirs)})")
    own = module.state_dict()
    state = {
        name: torch.empty(
            shape if shape is not None else tuple(own[name].shape) if name in own else (),
            device="meta",
        )
        for name, shape in found.weights.items()
    }
    reshaped: list[str] = []
    seen: dict[str, Any] = {}

    def compare_shapes(sub: Any, local: dict[str, Any], prefix: str, *args: Any) -> None:
        # Runs after the submodule's own hooks (registered at its construction) renamed keys.
        for name, t in [*sub.named_parameters(recurse=False), *sub.named_buffers(recurse=False)]:
            got = local.get(prefix + name)
            if got is not None and tuple(got.shape) != tuple(t.shape):
                reshaped.append(f"{prefix}{name} {tuple(got.shape)} (config: {tuple(t.shape)})")

    def keep_result(root: Any, incompatible: Any) -> None:
        seen["missing"], seen["unexpected"] = incompatible

    handles = [sub.register_load_state_dict_pre_hook(compare_shapes) for sub in module.modules()]
    handles.append(module.register_load_state_dict_post_hook(keep_result))
    try:
        module.load_state_dict(state, strict=False, assign=True)
    except RuntimeError as err:  # weights of another shape, recorded above
        if not reshaped:
            out.append(f"its weights do not load ({' '.join(str(err).split())[:300]})")
    finally:
        for handle in handles:
            handle.remove()
    params = dict(module.named_parameters())
    missing = [k for k in seen.get("missing", []) if k in params]
    if missing:
        out.append(f"{len(missing)} weight(s) of the config's module missing: {_some(missing)}")
    extra = list(seen.get("unexpected", []))
    if extra:
        out.append(f"{len(extra)} weight(s) the config's module does not have: {_some(extra)}")
    if reshaped:
        out.append(f"{len(reshaped)} weight(s) of another shape: {_some(reshaped)}")
    return out


def _some(items: list[str]) -> str:
    more = f" and {len(items) - SHOWN} more" if len(items) > SHOWN else ""
    return ", ".join(items[:SHOWN]) + more


def check_checkpoint(checkpoint: Path, exp: Any, algo_config: Any, shown: str) -> None:
    """Refuses a checkpoint whose policy module is not the one ``algo_config`` trains.

    Args:
        checkpoint: a local checkpoint directory (``iter_NNNNNN``).
        exp, algo_config: the run's experiment config and the AlgorithmConfig built from it.
        shown: the checkpoint as the user knows it, for messages.

    Raises:
        DamagedCheckpoint: a file of the checkpoint cannot be read.
        CheckpointMismatch: class, spaces or weights differ (the message lists how).
    """
    found = differences(checkpoint_module(checkpoint, shown), config_module(exp, algo_config))
    if found:
        key, tag = getattr(type(exp.model), "TAG_KEY", ("type", "?"))
        raise CheckpointMismatch(
            f"{shown} does not fit the model of the run's config (model.{key} {tag}): "
            f"{'; '.join(found)}. Its weights would not load (RLlib skips those that do not "
            "fit): give a checkpoint trained with this config, or use this one with the config "
            "it was trained with"
        )


def intact_checkpoint(
    run: RunDir, names: list[str], local: Callable[[str], Path], echo: Any = print
) -> tuple[str, Path]:
    """The newest of ``names`` (checkpoint names, oldest first) whose files are whole
    (``check_files``), as (name, local directory); each damaged newer one is passed over with
    a line through ``echo`` that names its damaged file and the checkpoint used instead.

    ``local``: a checkpoint's local directory (a URI run's is downloaded by it).

    Raises:
        FileNotFoundError: ``names`` is empty.
        DamagedCheckpoint: none of them is intact (the message names the newest's file).
    """
    if not names:
        raise FileNotFoundError(f"Run {run.location} has no checkpoint yet.")
    passed: list[DamagedCheckpoint] = []
    for name in reversed(names):
        path = local(name)
        try:
            check_files(path, run.uri(CHECKPOINTS, name))
        except DamagedCheckpoint as err:
            passed.append(err)
            continue
        for err in passed:
            echo(f"{err}; using {name} instead, the newest intact checkpoint")
        return name, path
    if len(names) == 1:
        raise passed[0]
    raise DamagedCheckpoint(f"{passed[0]}, and so are the run's older checkpoints")
