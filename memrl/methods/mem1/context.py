"""Context policies: the exact tokens an LLM agent sees at each turn, and its training layouts.

An episode is kept as explicit segments (never as a rolling buffer that could lose the prompt):

- the prompt (task instruction with the questions, chat template applied), token ids;
- per turn ``t``: the generated ids ``gen_t`` (exactly what was sampled, stop string included) and
  the observation ids ``obs_t`` that the env answered with (empty on the last turn).

A context policy says, for turn ``j``, which segments make up the model's input (``segments(j)``):

- ``mem1``: prompt + latest generation (internal state + action) + latest observation; everything
  older is dropped and positions restart at 0 (the MEM1 agent);
- ``full``: everything so far (the usual agent);
- ``last_k``: the prompt and the last ``k`` turns (a sliding window).

``context_ids`` renders those segments into token ids for rollout and benchmarks, and the training
layouts (``per_turn_units`` and ``packed_unit``) are derived from the very same ``segments`` call,
so the training mask can never drift from what the model saw at rollout (the MEM1 code's worst bug).

WebShop's format writes a scratch ``<think>`` block that is dropped from later contexts: a turn's
``scratch`` span marks those generated tokens; the pruning policies keep the rest ("kept" view).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

PolicyName = Literal["mem1", "full", "last_k"]
RefKind = Literal["prompt", "gen", "kept", "obs"]
SegmentRef = tuple[RefKind, int]
"""A segment of the episode: ("prompt", -1), ("gen", t) all of gen_t, ("kept", t) gen_t without its
scratch span, ("obs", t)."""

PROMPT_REF: SegmentRef = ("prompt", -1)


@dataclass
class Turn:
    """One turn of an episode, as token ids."""

    gen_ids: list[int]
    """What the model generated (sampled ids, stop string included)."""
    obs_ids: list[int] = field(default_factory=list)
    """The env's observation after this turn, as appended to later contexts (empty at the end)."""
    logps: list[float] | None = None
    """Behaviour log-probs of ``gen_ids`` (one per id)."""
    scratch: tuple[int, int] | None = None
    """Token span [a, b) of ``gen_ids`` that pruning policies drop from later contexts."""

    def kept_ids(self) -> list[int]:
        if self.scratch is None:
            return list(self.gen_ids)
        a, b = self.scratch
        return list(self.gen_ids[:a]) + list(self.gen_ids[b:])


def mem1_segments(j: int) -> list[SegmentRef]:
    """MEM1: the prompt, then the latest internal state + action, then the latest observation."""
    if j == 0:
        return [PROMPT_REF]
    return [PROMPT_REF, ("kept", j - 1), ("obs", j - 1)]


def full_segments(j: int) -> list[SegmentRef]:
    """The usual agent: every earlier turn in full."""
    refs: list[SegmentRef] = [PROMPT_REF]
    for t in range(j):
        refs += [("gen", t), ("obs", t)]
    return refs


def last_k_segments(j: int, k: int) -> list[SegmentRef]:
    """A sliding window: the prompt and the last ``k`` turns (their kept views)."""
    refs: list[SegmentRef] = [PROMPT_REF]
    for t in range(max(0, j - k), j):
        refs += [("kept", t), ("obs", t)]
    return refs


@dataclass(frozen=True)
class ContextPolicy:
    """A context policy by name (``mem1``, ``full``, ``last_k``) with its window size."""

    name: PolicyName = "mem1"
    """Which policy."""
    k: int = 1
    """Window size of ``last_k`` (turns kept)."""

    def __post_init__(self) -> None:
        if self.name not in _POLICIES:
            raise ValueError(
                f"Unknown context policy {self.name!r}. Available: {sorted(_POLICIES)}"
            )
        if self.k < 1:
            raise ValueError(f"last_k needs k >= 1, got k={self.k}")

    def segments(self, j: int) -> list[SegmentRef]:
        """Segments the model sees when it generates turn ``j`` (0-based)."""
        if j < 0:
            raise ValueError(f"turn index must be >= 0, got {j}")
        if self.name == "last_k":
            return last_k_segments(j, self.k)
        return _POLICIES[self.name](j)


_POLICIES: dict[str, Callable[[int], list[SegmentRef]]] = {
    "mem1": mem1_segments,
    "full": full_segments,
    "last_k": lambda j: last_k_segments(j, 1),
}


def segment_ids(ref: SegmentRef, prompt_ids: Sequence[int], turns: Sequence[Turn]) -> list[int]:
    """The token ids of one segment."""
    kind, t = ref
    if kind == "prompt":
        return list(prompt_ids)
    if kind == "gen":
        return list(turns[t].gen_ids)
    if kind == "kept":
        return turns[t].kept_ids()
    return list(turns[t].obs_ids)


def context_ids(
    policy: ContextPolicy, prompt_ids: Sequence[int], turns: Sequence[Turn], j: int
) -> list[int]:
    """The exact input ids of turn ``j``, given the episode's first ``j`` turns."""
    if j > len(turns):
        raise ValueError(f"turn {j} needs {j} earlier turns, the episode has {len(turns)}")
    ids: list[int] = []
    for ref in policy.segments(j):
        ids += segment_ids(ref, prompt_ids, turns)
    return ids


@dataclass
class Unit:
    """One training sequence: tokens, positions and a segment-level attention rule.

    Token ``q`` may attend to token ``k`` iff ``k <= q`` (causal) and ``vis[seg[q], seg[k]]``. Loss
    tokens are generated tokens; their log-prob is read from the logits one position earlier.
    """

    input_ids: np.ndarray
    """(T,) int64 token ids."""
    position_ids: np.ndarray
    """(T,) int64 positions as the model saw them at rollout (restarting per context)."""
    seg: np.ndarray
    """(T,) int64 segment index of each token."""
    vis: np.ndarray
    """(S, S) bool: segment a may attend to segment b."""
    loss_mask: np.ndarray
    """(T,) bool: generated tokens (the only ones the loss covers)."""
    behaviour_logp: np.ndarray
    """(T,) float32 rollout log-probs at loss tokens (0 elsewhere)."""
    token_order: np.ndarray
    """(T,) int64 index of a loss token among its episode's generated tokens (-1 elsewhere)."""

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])


def _logps(turn: Turn) -> list[float]:
    if turn.logps is None:
        return [0.0] * len(turn.gen_ids)
    if len(turn.logps) != len(turn.gen_ids):
        raise ValueError(f"turn has {len(turn.gen_ids)} ids but {len(turn.logps)} log-probs")
    return list(turn.logps)


def per_turn_units(
    policy: ContextPolicy, prompt_ids: Sequence[int], turns: Sequence[Turn]
) -> list[Unit]:
    """Exact layout: one sequence per turn, its real context followed by its generated ids."""
    units = []
    order = 0
    for j, turn in enumerate(turns):
        ctx = context_ids(policy, prompt_ids, turns, j)
        if not ctx:
            raise ValueError(f"turn {j} has an empty context; the prompt must not be empty")
        n_ctx, n_gen = len(ctx), len(turn.gen_ids)
        ids = np.asarray(ctx + list(turn.gen_ids), dtype=np.int64)
        loss = np.zeros(n_ctx + n_gen, dtype=bool)
        loss[n_ctx:] = True
        logp = np.zeros(n_ctx + n_gen, dtype=np.float32)
        logp[n_ctx:] = _logps(turn)
        tok_order = np.full(n_ctx + n_gen, -1, dtype=np.int64)
        tok_order[n_ctx:] = np.arange(order, order + n_gen)
        order += n_gen
        units.append(
            Unit(
                input_ids=ids,
                position_ids=np.arange(n_ctx + n_gen, dtype=np.int64),
                seg=np.zeros(n_ctx + n_gen, dtype=np.int64),
                vis=np.ones((1, 1), dtype=bool),
                loss_mask=loss,
                behaviour_logp=logp,
                token_order=tok_order,
            )
        )
    return units


def packed_unit(policy: ContextPolicy, prompt_ids: Sequence[int], turns: Sequence[Turn]) -> Unit:
    """MEM1's masked-trajectory packing: the whole episode as one sequence with a 2D mask.

    The flat order is ``prompt, gen_0, obs_0, gen_1, obs_1, ...``. The mask comes from
    ``policy.segments``: ``gen_j`` sees the segments of its rollout context plus itself; ``obs_j``
    sees the segments that precede it in the context of turn ``j + 1`` plus itself. Generated tokens
    keep their rollout positions. Exact for ``full``; for pruning policies an approximation, since
    earlier segments' hidden states were computed under a different context at rollout.
    """
    pieces: list[tuple[SegmentRef | str, list[int]]] = [(PROMPT_REF, list(prompt_ids))]
    # Pieces of gen_t: the kept parts and the scratch span are separate segments.
    piece_index: dict[tuple[str, int], list[int]] = {("prompt", -1): [0]}
    for t, turn in enumerate(turns):
        spans = [(0, len(turn.gen_ids), True)]
        if turn.scratch is not None:
            a, b = turn.scratch
            spans = [(0, a, True), (a, b, False), (b, len(turn.gen_ids), True)]
        gen_pieces, kept_pieces = [], []
        for a, b, kept in spans:
            if b > a:
                gen_pieces.append(len(pieces))
                if kept:
                    kept_pieces.append(len(pieces))
                pieces.append((("gen", t), list(turn.gen_ids[a:b])))
        piece_index[("gen", t)] = gen_pieces
        piece_index[("kept", t)] = kept_pieces
        piece_index[("obs", t)] = [len(pieces)] if turn.obs_ids else []
        if turn.obs_ids:
            pieces.append((("obs", t), list(turn.obs_ids)))

    num = len(pieces)
    vis = np.zeros((num, num), dtype=bool)
    vis[0, 0] = True
    positions: list[np.ndarray] = [np.arange(len(prompt_ids))]
    for t in range(len(turns)):
        ctx_refs = policy.segments(t)
        ctx_len = sum(len(segment_ids(r, prompt_ids, turns)) for r in ctx_refs)
        seen = [p for r in ctx_refs for p in piece_index[r]]
        offset = 0
        for p in piece_index[("gen", t)]:
            vis[p, seen] = True
            vis[p, piece_index[("gen", t)]] = True
            n = len(pieces[p][1])
            positions.append(np.arange(ctx_len + offset, ctx_len + offset + n))
            offset += n
        for p in piece_index[("obs", t)]:
            next_refs = policy.segments(t + 1) if t + 1 <= len(turns) else []
            before: list[int] = []
            obs_pos = 0
            for r in next_refs:
                if r == ("obs", t):
                    break
                before += piece_index[r]
                obs_pos += len(segment_ids(r, prompt_ids, turns))
            vis[p, before] = True
            vis[p, p] = True
            positions.append(np.arange(obs_pos, obs_pos + len(pieces[p][1])))

    ids = np.concatenate([np.asarray(ids, dtype=np.int64) for _, ids in pieces])
    seg = np.concatenate(
        [np.full(len(ids_), i, dtype=np.int64) for i, (_, ids_) in enumerate(pieces)]
    )
    loss = np.concatenate([np.full(len(ids_), ref[0] == "gen", dtype=bool) for ref, ids_ in pieces])
    logp = np.zeros(len(ids), dtype=np.float32)
    logp[loss] = np.concatenate([_logps(t) for t in turns]) if turns else []
    tok_order = np.full(len(ids), -1, dtype=np.int64)
    tok_order[loss] = np.arange(int(loss.sum()))
    # A loss token's log-prob comes from the previous flat token, which must belong to its
    # context (an empty observation would make it the previous turn's last generated token).
    for t, turn in enumerate(turns[:-1]):
        if not turn.obs_ids:
            raise ValueError(f"turn {t} is not the last but has no observation tokens")
    return Unit(
        input_ids=ids,
        position_ids=np.concatenate(positions).astype(np.int64),
        seg=seg,
        vis=vis,
        loss_mask=loss,
        behaviour_logp=logp,
        token_order=tok_order,
    )


def dense_mask(seg: np.ndarray, vis: np.ndarray) -> np.ndarray:
    """(T, T) bool mask of a unit: causal and segment-visible."""
    t = seg.shape[0]
    causal = np.tril(np.ones((t, t), dtype=bool))
    return causal & vis[seg[:, None], seg[None, :]]


def packed_exact_unit(
    policy: ContextPolicy, prompt_ids: Sequence[int], turns: Sequence[Turn]
) -> Unit:
    """The whole episode as one sequence that reproduces every rollout context exactly.

    A segment's hidden states depend on what precedes it in its context and on its positions, so
    each segment occurrence is keyed by (segment, the segments before it in that context); equal
    keys share one copy, different keys get their own. Under ``full`` nothing is copied (the same
    sequence as ``packed_unit``); under ``mem1`` each turn's kept generation appears twice (as
    generated, with the loss; and re-encoded at the head of the next context, as the rollout does),
    and the prompt is shared by all turns instead of being repeated per turn as in ``per_turn``.
    """
    ids_list: list[list[int]] = []
    pos_list: list[np.ndarray] = []
    vis_rows: list[list[int]] = []
    loss_list: list[bool] = []
    index: dict[tuple[SegmentRef, tuple[SegmentRef, ...]], int] = {}

    def add(ids: list[int], start: int, seen: list[int], loss: bool) -> int:
        ids_list.append(ids)
        pos_list.append(np.arange(start, start + len(ids)))
        vis_rows.append([*seen, len(ids_list) - 1])
        loss_list.append(loss)
        return len(ids_list) - 1

    for j, turn in enumerate(turns):
        seen: list[int] = []
        prefix: list[SegmentRef] = []
        start = 0
        for ref in policy.segments(j):
            ids = segment_ids(ref, prompt_ids, turns)
            if ref[0] == "kept" and turns[ref[1]].scratch is None:
                ref = ("gen", ref[1])  # the same tokens: let it share with the generated copy
            if ids:
                key = (ref, tuple(prefix))
                if key not in index:
                    index[key] = add(ids, start, seen, loss=False)
                seen.append(index[key])
            prefix.append(ref)
            start += len(ids)
        if seen and seen[-1] != len(ids_list) - 1:
            raise ValueError(
                f"turn {j}: its context's last segment is not the previous flat "
                "segment, so its first token's log-prob would be read wrongly"
            )
        # The generated tokens are also what a later context with the same prefix would encode.
        index[(("gen", j), tuple(prefix))] = add(list(turn.gen_ids), start, seen, loss=True)

    n = len(ids_list)
    vis = np.zeros((n, n), dtype=bool)
    for a, row in enumerate(vis_rows):
        vis[a, row] = True
    lengths = [len(x) for x in ids_list]
    loss = np.repeat(np.asarray(loss_list, dtype=bool), lengths)
    logp = np.zeros(int(sum(lengths)), dtype=np.float32)
    logp[loss] = np.concatenate([_logps(t) for t in turns]) if turns else []
    tok_order = np.full(len(logp), -1, dtype=np.int64)
    tok_order[loss] = np.arange(int(loss.sum()))
    return Unit(
        input_ids=np.concatenate([np.asarray(x, dtype=np.int64) for x in ids_list]),
        position_ids=np.concatenate(pos_list).astype(np.int64),
        seg=np.repeat(np.arange(n, dtype=np.int64), lengths),
        vis=vis,
        loss_mask=loss,
        behaviour_logp=logp,
        token_order=tok_order,
    )
