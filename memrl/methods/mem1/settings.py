"""MEM1's settings: the ONE place that wires its pieces into an RLlib AlgorithmConfig.

- ``model: {type: llm, ...}`` -> ``LLMModelSettings``: which causal LM (a Hugging Face model
  directory or name, or ``tiny``: a random Qwen2-shaped model and a BPE tokenizer built into the
  run directory), LoRA, dtype, and the generation backend of the env runners. ``apply`` sets the
  RLModule spec (``LLMRLModule``, memrl/methods/mem1/rlmodule.py).
- ``algorithm: {name: mem1, ...}`` -> ``Mem1Settings``: token-level PPO or GRPO on multi-turn text
  envs under a context policy (mem1, full, last_k). ``make_algorithm_config`` returns a
  ``Mem1Config`` (memrl/methods/mem1/algorithm.py) that runs ``TextEnvRunner``s
  (memrl/methods/mem1/env_runner.py) and ``TokenLearner``s (memrl/methods/mem1/learner.py).
  Defaults follow the MEM1 paper: PPO with a critic, gamma = lambda = 1, KL 0.001 to a frozen
  reference folded into the reward, clip 0.2, actor lr 1e-6, critic lr 1e-5, two minibatches per
  batch, temperature 1, 1000 tokens per turn.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from memrl.methods.mem1.generation.base import GenerationSettings
from memrl.methods.mem1.network import DEFAULT_LOGP_CHUNK_TOKENS, LoRASettings
from memrl.methods.mem1.pretrained import resolve_model_path
from memrl.methods.mem1.prompts import PromptSettings, check_tags
from memrl.methods.mem1.tiny import TinyModelSettings

if TYPE_CHECKING:
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig


@dataclass(frozen=True)
class LLMModelSettings:
    """A causal LM policy (any Hugging Face model, or a tiny local one) and how it generates."""

    TAG_KEY: ClassVar[tuple[str, str]] = ("type", "llm")

    path: str = "tiny"
    """A local model directory, a model name, or ``tiny`` (a random Qwen2-shaped model and a BPE
    tokenizer built locally from the env's text, written under the run directory)."""
    tiny: TinyModelSettings = field(default_factory=TinyModelSettings)
    """Shape of the ``tiny`` model."""
    tiny_corpus_episodes: int = 200
    """Env episodes whose text trains the ``tiny`` tokenizer."""
    lora: LoRASettings = field(default_factory=LoRASettings)
    """LoRA adapters (peft)."""
    dtype: str = "auto"
    """The weights' dtype: auto (float32: trained weights keep a float32 copy, since small
    updates of bfloat16 weights round away), float32, bfloat16 or float16."""
    compute_dtype: str = "auto"
    """The dtype forward passes compute in, learners and the hf backend alike (autocast over
    the weights): auto (bfloat16 on GPU, the weights' dtype on CPU), float32, bfloat16 or
    float16. On CPUs with AMX or AVX-512 bfloat16 units, bfloat16 trains SmolLM2-135M 1.7-1.9x
    and generates 1.6x faster than float32 (memrl bench mem1-speed --compute-dtype float32
    bfloat16)."""
    value_head: bool | None = None
    """Value head for PPO's critic (null: on when algorithm.algorithm is ppo)."""
    logp_chunk_tokens: int = DEFAULT_LOGP_CHUNK_TOKENS
    """Learner log-probs are computed this many positions at a time, and only at loss tokens, so
    the logits of a whole row over the vocabulary never exist at once."""
    full_logits: bool = False
    """Compute every position's logits at once instead (the LM's own forward: ~5 GB of fp32
    logits per 8k-token row of Qwen2.5); for comparison, or for LMs that change their logits
    after the output layer (e.g. soft-capping)."""
    activation_checkpointing: bool = False
    """Learners keep only each decoder layer's input and recompute the rest in the backward pass
    (much less activation memory for about a third more compute)."""
    freeze_layers: int = 0
    """The input embeddings and the lowest N decoder layers do not train: the forward pass below
    layer N keeps nothing for the backward pass, which stops there (with N = 24 of
    SmolLM2-135M's 30 layers, an update costs about a quarter of full fine-tuning on a CPU).
    LoRA adapters go only on the layers above N. 0: every layer trains."""
    generation: GenerationSettings = field(default_factory=GenerationSettings)
    """The generation backend of the env runners."""

    def validate(self, where: str) -> None:
        for name in ("dtype", "compute_dtype"):
            if getattr(self, name) not in ("auto", "float32", "bfloat16", "float16"):
                raise ValueError(
                    f"{where}.{name} must be auto, float32, bfloat16 or float16, "
                    f"got {getattr(self, name)!r}"
                )
        if self.logp_chunk_tokens < 1:
            raise ValueError(
                f"{where}.logp_chunk_tokens must be >= 1, got {self.logp_chunk_tokens}"
            )
        if self.freeze_layers < 0:
            raise ValueError(f"{where}.freeze_layers must be >= 0, got {self.freeze_layers}")

    def model_config(self, exp: Any) -> dict[str, Any]:
        """The RLModule's model_config dict (the tiny model is materialized here, once)."""
        path = self.path
        if path.startswith((".", "/", "~")) and not Path(path).expanduser().exists():
            raise FileNotFoundError(
                f"model.path {path!r} does not exist; give a model directory, "
                "a model name, or 'tiny'"
            )
        if path == "tiny":
            path = str(self.tiny_checkpoint(exp))
        else:
            path = resolve_model_path(path)
            self._check_freeze_layers(path)
        algo = getattr(exp, "algorithm", None)
        value_head = self.value_head
        if value_head is None:
            value_head = getattr(algo, "algorithm", "ppo") == "ppo"
        return {
            "path": path,
            "dtype": self.dtype,
            "compute_dtype": self.compute_dtype,
            "lora": dataclasses.asdict(self.lora),
            "value_head": bool(value_head),
            "logp_chunk_tokens": self.logp_chunk_tokens,
            "full_logits": self.full_logits,
            "activation_checkpointing": self.activation_checkpointing,
            "freeze_layers": self.freeze_layers,
            "generation": dataclasses.asdict(self.generation),
        }

    def _check_freeze_layers(self, path: str) -> None:
        """Before any actor loads the model: freeze_layers must leave a layer to train."""
        config = Path(path).expanduser() / "config.json"
        if not self.freeze_layers or not config.is_file():
            return
        layers = json.loads(config.read_text()).get("num_hidden_layers")
        if isinstance(layers, int) and self.freeze_layers >= layers:
            raise ValueError(
                f"model.freeze_layers is {self.freeze_layers} but {path} has {layers} decoder "
                f"layers: freeze at most {layers - 1} so that at least one trains"
            )

    def tiny_checkpoint(self, exp: Any) -> Path:
        """The run's tiny model (built on first use under ``<run dir>/tiny_model``)."""
        from memrl.methods.mem1.tiny import ensure_tiny_checkpoint

        prompt = getattr(getattr(exp, "algorithm", None), "prompt", None) or PromptSettings()
        return ensure_tiny_checkpoint(
            Path(exp.run_dir) / "tiny_model",
            exp.env.id,
            exp.env.config,
            prompt,
            self.tiny,
            self.tiny_corpus_episodes,
        )

    def apply(self, algo: Any, exp: Any) -> None:
        from ray.rllib.core.rl_module.rl_module import RLModuleSpec

        from memrl.methods.mem1.rlmodule import LLMRLModule

        algo.rl_module(
            rl_module_spec=RLModuleSpec(
                module_class=LLMRLModule, model_config=self.model_config(exp)
            )
        )


@dataclass(frozen=True)
class WarmStartSettings:
    """Supervised fine-tuning on the scripted agent's trajectories before RL (off when 0)."""

    episodes: int = 0
    """Scripted episodes to imitate (0: no warm start)."""
    epochs: int = 3
    """Passes over them."""
    lr: float = 1e-3
    """Adam learning rate of the warm start."""
    rows_per_batch: int = 8
    """Packed rows per optimizer step."""
    task_offset: int = 0
    """First train-split task index the scripted agent plays."""
    env_config: dict[str, Any] = field(default_factory=dict)
    """env.config overrides for the scripted episodes, e.g. ``{test_fraction: 0.5}`` so the warm
    start sees only part of the train questions and RL also meets questions it never imitated."""

    def env(self, env_config: dict[str, Any]) -> dict[str, Any]:
        """The env.config the scripted episodes run on: ``env_config`` with the overrides."""
        return {**env_config, **self.env_config}

    def validate(self, where: str) -> None:
        if self.episodes < 0 or self.epochs < 1 or self.lr <= 0 or self.rows_per_batch < 1:
            raise ValueError(
                f"{where}: episodes must be >= 0, epochs and rows_per_batch >= 1, "
                f"lr > 0; got {self}"
            )


_EVAL_SET_KEYS = {"env_config", "task_offset"}

ALGORITHMS = ("ppo", "grpo", "raft", "imitation")
"""MEM1's updates (``Mem1Settings.algorithm``)."""


@dataclass(frozen=True)
class Mem1Settings:
    """An LLM agent with a context policy, trained by token-level PPO or GRPO."""

    TAG_KEY: ClassVar[tuple[str, str]] = ("name", "mem1")

    algorithm: Literal["ppo", "grpo", "raft", "imitation"] = "ppo"
    """``ppo``: critic + GAE(1, 1), KL folded into the reward; ``grpo``: group-normalized outcome
    reward over ``group_size`` rollouts per task, KL as a loss term, no critic; ``raft``:
    reward-filtered fine-tuning (expert iteration): ``group_size`` rollouts per task, token NLL
    on the episodes that solved their task outright (every question exact, no format error), so
    a partly right guess is never reinforced; ``imitation``: the same NLL update on fresh
    episodes of the env's scripted agent (the compute-matched control of RL)."""
    context_policy: Literal["mem1", "full", "last_k"] = "mem1"
    """What the model sees each turn (memrl/methods/mem1/context.py)."""
    last_k: int = 1
    """Turns kept by ``last_k``."""
    prompt: PromptSettings = field(default_factory=PromptSettings)
    """Prompt template, tag names, observation and chat templates."""
    sequence_mode: Literal["per_turn", "packed", "packed_exact"] = "per_turn"
    """``per_turn``: each turn's real context is its own training sequence (exact);
    ``packed``: one sequence per episode with MEM1's 2D attention mask (fewest tokens, approximate);
    ``packed_exact``: one sequence per episode that re-encodes each turn's kept state at the head of
    the next context, as the rollout does (exact; shares the prompt across turns)."""
    group_size: int = 1
    """Rollouts per task drawn together (GRPO needs >= 2; envs per runner must divide by it)."""
    rounds_per_sample: int = 1
    """Rounds of ``num_envs_per_env_runner`` episodes each env runner plays per iteration."""
    dynamic_sampling: int = 0
    """Dynamic sampling (DAPO): groups that carry no signal leave the batch (GRPO: every
    reward of the group equal, so every advantage 0; RAFT: no episode of the group solved its
    task) and the env runners sample again, up to ``dynamic_sampling_rounds`` times in all,
    until the batch holds at least this many groups with signal (0: off, every group trains)."""
    dynamic_sampling_rounds: int = 4
    """Most samplings per iteration under ``dynamic_sampling``; the batch trains on what it
    holds after the last one."""
    max_tokens_per_turn: int = 1000
    """Generation budget of one turn."""
    max_obs_tokens: int = 1024
    """Observation tokens kept per turn."""
    lr: float = 1e-6
    """Actor learning rate."""
    lr_warmup_steps: int = 0
    """The actor learning rate rises linearly from lr / N to lr over the first N optimizer
    steps (0: none). Adam's first steps move every weight by about lr whatever the gradient's
    size (its moment estimates start empty); a warm-up keeps those steps small."""
    critic_lr: float = 1e-5
    """Critic (value head) learning rate."""
    kl_coef: float = 0.001
    """Weight of the KL to the frozen reference (PPO: in the reward; GRPO: in the loss)."""
    clip: float = 0.2
    """Policy ratio clip."""
    vf_clip: float = 0.5
    """Value clip (in return units)."""
    vf_loss_coeff: float = 1.0
    """Weight of the value loss."""
    whiten_advantages: bool = True
    """Normalize PPO advantages over the batch's generated tokens."""
    num_minibatches: int = 2
    """Optimizer steps per epoch (the batch split by rows)."""
    num_epochs: int = 1
    """Passes over each batch."""
    max_tokens_per_row: int = 4096
    """Training rows pack sequences up to this many tokens."""
    micro_batch_tokens: int = 4096
    """Tokens a learner puts through one forward/backward pass (rows x longest row, at least one
    row); a minibatch is split into such micro-batches with gradients accumulated, so learner
    memory stays flat as the minibatch grows. The default, one full row (max_tokens_per_row),
    keeps 8 rows within 1.11x the peak of one (`memrl bench mem1-memory --tokens 4096
    --minibatch 1 8`); larger micro-batches trade memory for fewer, fuller passes on a GPU.
    Also the size of the scoring passes."""
    fsdp: bool = False
    """Shard the LM over the learners with torch FSDP2 (full fine-tuning of models that one GPU
    cannot hold with their gradients and AdamW state; needs resources.num_learners >= 2 and no
    LoRA). Off: every learner holds the whole model and gradients are averaged (DDP)."""
    grad_clip: float = 1.0
    """Global gradient-norm clip."""
    recompute_old_logp: bool = True
    """Ratio denominators from the learner's own pre-update pass (exactly 1 at the start, also in
    packed mode) instead of the rollout's log-probs; the gap between the two is logged."""
    format_penalty: float = 0.0
    """Subtracted from an episode's reward per turn the env could not parse."""
    train_tasks: int = 0
    """Tasks drawn for training are task_index 0..train_tasks-1 (0: the env draws by seed)."""
    eval_every: int = 0
    """Evaluate on held-out tasks every N iterations, from iteration 0, before that iteration's
    update (0: never); logged as env_runners/eval_em, eval_f1, eval_peak_tokens."""
    eval_env_config: dict[str, Any] = field(default_factory=lambda: {"split": "test"})
    """env.config overrides of the evaluation env (default: the test split)."""
    eval_tasks: int = 32
    """Held-out tasks per evaluation (task_index 0..eval_tasks-1, greedy decoding)."""
    eval_extra: dict[str, dict[str, Any]] = field(default_factory=dict)
    """More evaluation sets, evaluated with the main one: name -> ``{env_config: {...},
    task_offset: K}`` (tasks K..K+eval_tasks-1 of an env with these env.config overrides), logged
    as eval_NAME_em, eval_NAME_f1. E.g. tasks beyond ``train_tasks`` of the train split, which no
    training draws: ``{unseen_tasks: {env_config: {split: train}, task_offset: 1000}}``."""
    warm_start: WarmStartSettings = field(default_factory=WarmStartSettings)
    """Supervised warm start on scripted trajectories."""

    def validate(self, where: str) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ValueError(
                f"{where}.algorithm must be one of {list(ALGORITHMS)}, got {self.algorithm!r}"
            )
        if self.dynamic_sampling < 0:
            raise ValueError(
                f"{where}.dynamic_sampling must be >= 0 (0: off), got {self.dynamic_sampling}"
            )
        if self.dynamic_sampling and self.algorithm not in ("grpo", "raft"):
            raise ValueError(
                f"{where}.dynamic_sampling drops groups without signal, which only grpo and "
                f"raft have; got algorithm {self.algorithm!r}: set dynamic_sampling: 0"
            )
        if self.algorithm == "grpo" and self.group_size < 2:
            raise ValueError(
                f"{where}.group_size must be >= 2 for grpo (rollouts per task to "
                f"normalize over), got {self.group_size}"
            )
        for name in (
            "group_size",
            "rounds_per_sample",
            "dynamic_sampling_rounds",
            "max_tokens_per_turn",
            "num_minibatches",
            "num_epochs",
            "max_tokens_per_row",
            "micro_batch_tokens",
            "last_k",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{where}.{name} must be >= 1, got {getattr(self, name)}")
        if self.lr <= 0 or self.critic_lr <= 0 or self.kl_coef < 0 or not 0 < self.clip < 1:
            raise ValueError(f"{where}: lr and critic_lr must be > 0, kl_coef >= 0, clip in (0, 1)")
        if self.lr_warmup_steps < 0:
            raise ValueError(
                f"{where}.lr_warmup_steps must be >= 0 (0: no warm-up), got {self.lr_warmup_steps}"
            )
        for name, spec in self.eval_extra.items():
            ok = name.isidentifier() and isinstance(spec, dict) and set(spec) <= _EVAL_SET_KEYS
            if ok:
                offset = spec.get("task_offset", 0)
                ok = isinstance(spec.get("env_config", {}), dict) and (
                    isinstance(offset, int) and not isinstance(offset, bool) and offset >= 0
                )
            if not ok:
                raise ValueError(
                    f"{where}.eval_extra.{name}: expected a name of letters, digits and _ "
                    "mapping to {env_config: {...}, task_offset: int >= 0}, "
                    f"got {spec!r}"
                )

    def eval_sets(self) -> dict[str, tuple[dict[str, Any], int]]:
        """Every evaluation set: metric prefix -> (env.config overrides, first task index); the
        main set (``eval_env_config``, prefix ``""``) first, then ``eval_extra``."""
        sets = {"": (dict(self.eval_env_config), 0)}
        for name, spec in self.eval_extra.items():
            sets[f"{name}_"] = (dict(spec.get("env_config", {})), int(spec.get("task_offset", 0)))
        return sets

    def make_algorithm_config(self, exp: Any) -> AlgorithmConfig:
        from memrl.methods.mem1.algorithm import Mem1Config

        envs = exp.resources.num_envs_per_env_runner
        if envs % self.group_size:
            raise ValueError(
                f"resources.num_envs_per_env_runner ({envs}) must be a multiple of "
                f"algorithm.group_size ({self.group_size}): each runner draws whole groups"
            )
        check_tags(self.prompt, exp.env.config)
        if self.algorithm == "imitation":
            from memrl.methods.mem1.warm_start import SCRIPTED_ENVS

            if exp.env.id not in SCRIPTED_ENVS:
                raise ValueError(
                    f"algorithm.algorithm imitation plays the env's scripted agent; env "
                    f"{exp.env.id!r} has none (those that do: {list(SCRIPTED_ENVS)})"
                )
        if self.fsdp and exp.resources.num_learners < 2:
            raise ValueError(
                "algorithm.fsdp shards the model over learners: set resources.num_learners >= 2 "
                f"(got {exp.resources.num_learners}), or fsdp: false for one learner"
            )
        if self.fsdp and getattr(getattr(exp.model, "lora", None), "enabled", False):
            raise ValueError(
                "algorithm.fsdp is for full fine-tuning; with model.lora.enabled the adapters "
                "train with DDP over the learners: set algorithm.fsdp: false"
            )
        config = Mem1Config()
        config.mem1 = self
        config.text_env_id = exp.env.id
        config.env_runners(create_local_env_runner=exp.resources.num_env_runners == 0)
        config.training(grad_clip=self.grad_clip, grad_clip_by="global_norm")
        return config
