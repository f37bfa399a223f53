"""Generation with an in-process vLLM engine on a GPU env runner (extra ``vllm``, vLLM 0.33.x).

Written against vLLM 0.33's documented interfaces and checked only on a GPU machine
(``scripts/gpu_learner_check.sh`` runs ``scripts/gpu_vllm_check.py`` first); vLLM cannot be
installed where the rest of memrl is tested, and its weight-sync API changed between minor
versions, hence the pinned range (``VLLM_RANGE``), checked at start.

- The engine starts from the model folder the policy was loaded from, on the env runner's GPU.
- Weight syncs: full fine-tuning sends the runner's weights through vLLM's weight-transfer API
  with the CUDA-IPC backend (the engine and the runner share the GPU: no copy through the CPU,
  no model folder written); with LoRA only the adapters are written (a few MB) and loaded as a
  ``LoRARequest`` in place, the base weights never move.
- Behaviour log-probs: ``logprobs_mode="processed_logprobs"``, the log-probs of the distribution
  sampled from (after temperature and top-p), as the ``hf`` backend records them.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Sequence
from typing import Any

from memrl.methods.mem1.generation.base import Generation, GenerationSettings
from memrl.methods.mem1.generation.hf import end_token_ids

logger = logging.getLogger(__name__)

VLLM_RANGE = ((0, 33), (0, 34))
"""Supported vLLM versions: [0.33, 0.34) (also pinned in pyproject's ``vllm`` extra)."""


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as err:
        raise ImportError(
            "generation backend 'vllm' needs vLLM: pip install -e .[vllm] (GPU nodes only), "
            "or set model.generation.backend: hf"
        ) from err
    version = tuple(int(p) for p in vllm.__version__.split(".")[:2] if p.isdigit())
    low, high = VLLM_RANGE
    if not low <= version < high:
        raise ImportError(
            f"vLLM {vllm.__version__} is installed; the vllm backend is written for vLLM "
            f"{low[0]}.{low[1]}.x (pip install -e .[vllm] installs it)"
        )
    return vllm


class _EngineClient:
    """vLLM's weight-sync client protocol over an in-process ``LLM``."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        self.llm.init_weight_transfer_engine({"init_info": init_info})

    def start_weight_update(self) -> None:
        self.llm.start_weight_update()

    def update_weights(self, update_info: Any) -> None:
        self.llm.update_weights({"update_info": update_info})

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self.llm.finish_weight_update(weight_version)


class VLLMBackend:
    """A vLLM engine beside the env runner's copy of the policy, refreshed after each sync."""

    def __init__(
        self, lm: Any, tokenizer: Any, settings: GenerationSettings, model_path: str | None
    ) -> None:
        _import_vllm()
        if model_path is None:
            raise ValueError("the vllm backend needs the model folder the policy was loaded from")
        from vllm import LLM
        from vllm.config import WeightTransferConfig

        self.tokenizer = tokenizer
        self.settings = settings
        self.lora = hasattr(lm, "get_base_model")  # a peft model
        self.eos_ids = end_token_ids(lm.get_base_model() if self.lora else lm, tokenizer)
        if self.lora:
            rank = max(int(c.r) for c in lm.peft_config.values())
            extra = {"enable_lora": True, "max_lora_rank": rank, "max_loras": 1}
            self._adapter_dir = tempfile.mkdtemp(prefix="memrl_lora_")
        else:
            extra = {"weight_transfer_config": WeightTransferConfig(backend="ipc")}
        self._llm = LLM(
            model=model_path,
            dtype="bfloat16",
            gpu_memory_utilization=settings.gpu_memory_utilization,
            enable_prefix_caching=True,
            seed=settings.seed,
            logprobs_mode="processed_logprobs",
            **extra,
        )
        self._lora_request = None
        self._sender = None
        self._sender_lm = None
        self.update_weights(lm)

    def update_weights(self, lm: Any) -> None:
        if self.lora:
            from vllm.lora.request import LoRARequest

            lm.save_pretrained(self._adapter_dir)  # a peft model writes its adapters only
            self._lora_request = LoRARequest("policy", 1, self._adapter_dir, load_inplace=True)
        else:
            if self._sender is None or self._sender_lm is not lm:
                from vllm.distributed.weight_transfer.base import ModuleSource
                from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory
                from vllm.distributed.weight_transfer.ipc_engine import IPCTrainerInitInfo

                self._sender = WeightTransferTrainerFactory.trainer_init(
                    IPCTrainerInitInfo(rank=0),
                    client=_EngineClient(self._llm),
                    source=ModuleSource(lm),
                )
                self._sender_lm = lm
            self._sender.send_weights()
        self._llm.reset_prefix_cache()

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        stops: Sequence[Sequence[str]],
        max_new_tokens: int,
        *,
        greedy: bool = False,
    ) -> list[Generation]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = [
            SamplingParams(
                temperature=0.0 if greedy else self.settings.temperature,
                top_p=self.settings.top_p,
                max_tokens=max_new_tokens,
                stop=list(s),
                stop_token_ids=sorted(self.eos_ids),
                include_stop_str_in_output=True,
                logprobs=0,
            )
            for s in stops
        ]
        outputs = self._llm.generate(
            [TokensPrompt(prompt_token_ids=list(p)) for p in prompts],
            params,
            use_tqdm=False,
            lora_request=self._lora_request,
        )
        results = []
        for out in outputs:
            c = out.outputs[0]
            ids = list(c.token_ids)
            logps = [float(lp[t].logprob) for lp, t in zip(c.logprobs, ids, strict=True)]
            reason = "stop" if c.finish_reason == "stop" else "length"
            if ids and ids[-1] in self.eos_ids:
                reason = "eos"
            results.append(Generation(ids=ids, logps=logps, text=c.text, finish_reason=reason))
        return results
