"""Episodes -> rows of packed token sequences (advantages over them: advantages.py).

Every sequence mode produces ``Unit``s from the context policy (memrl/methods/mem1/context.py):
``per_turn`` one exact unit per turn, ``packed`` one masked unit per episode (MEM1's
approximation), ``packed_exact`` one unit per episode that re-encodes what differs (exact).
Units are then packed first-fit into rows of at most ``max_tokens_per_row`` tokens; inside a row
each unit keeps its own segments and positions, and units never see each other (block-diagonal
``vis``), so packing wastes no compute on padding beyond each row's tail.

Columns of a row batch (B rows, T tokens, S segments):
``input_ids``, ``position_ids``, ``seg`` (B, T) int64; ``vis`` (B, S, S) bool; ``loss_mask`` (B, T)
bool; ``behaviour_logp`` (B, T) float32; ``episode`` and ``token_order`` (B, T) int64 (-1 off loss).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from memrl.methods.mem1.context import (
    ContextPolicy,
    Unit,
    packed_exact_unit,
    packed_unit,
    per_turn_units,
)

SEQUENCE_MODES = ("per_turn", "packed", "packed_exact")


def episode_units(
    episodes: Sequence[Any], policy: ContextPolicy, mode: str
) -> list[tuple[int, Unit]]:
    """(episode index, unit) pairs of a list of ``TextEpisode``s in a sequence mode."""
    if mode not in SEQUENCE_MODES:
        raise ValueError(f"sequence_mode must be one of {SEQUENCE_MODES}, got {mode!r}")
    out = []
    for e, ep in enumerate(episodes):
        if not ep.turns:
            continue
        if mode == "per_turn":
            out += [(e, u) for u in per_turn_units(policy, ep.prompt_ids, ep.turns)]
        elif mode == "packed":
            out.append((e, packed_unit(policy, ep.prompt_ids, ep.turns)))
        else:
            out.append((e, packed_exact_unit(policy, ep.prompt_ids, ep.turns)))
    return out


def pack_rows(units: Sequence[tuple[int, Unit]], max_tokens_per_row: int) -> list[list[int]]:
    """First-fit-decreasing bins of unit indices; a unit longer than the cap gets its own row."""
    order = sorted(range(len(units)), key=lambda i: -len(units[i][1]))
    rows: list[list[int]] = []
    room: list[int] = []
    for i in order:
        n = len(units[i][1])
        for r, free in enumerate(room):
            if n <= free:
                rows[r].append(i)
                room[r] -= n
                break
        else:
            rows.append([i])
            room.append(max(0, max_tokens_per_row - n))
    return rows


def collate(
    units: Sequence[tuple[int, Unit]], rows: Sequence[Sequence[int]], pad_id: int
) -> dict[str, np.ndarray]:
    """Row batch of the given bins (see the module docstring for the columns)."""
    lengths = [sum(len(units[i][1]) for i in row) for row in rows]
    segs = [sum(units[i][1].vis.shape[0] for i in row) for row in rows]
    b, t, s = len(rows), max(lengths), max(segs) + 1  # + one padding segment
    cols = {
        "input_ids": np.full((b, t), pad_id, dtype=np.int64),
        "position_ids": np.zeros((b, t), dtype=np.int64),
        "seg": np.full((b, t), s - 1, dtype=np.int64),
        "vis": np.zeros((b, s, s), dtype=bool),
        "loss_mask": np.zeros((b, t), dtype=bool),
        "behaviour_logp": np.zeros((b, t), dtype=np.float32),
        "episode": np.full((b, t), -1, dtype=np.int64),
        "token_order": np.full((b, t), -1, dtype=np.int64),
    }
    cols["vis"][:, s - 1, s - 1] = True
    for r, row in enumerate(rows):
        pos, seg0 = 0, 0
        for i in row:
            e, u = units[i]
            n, k = len(u), u.vis.shape[0]
            sl = slice(pos, pos + n)
            cols["input_ids"][r, sl] = u.input_ids
            cols["position_ids"][r, sl] = u.position_ids
            cols["seg"][r, sl] = u.seg + seg0
            cols["vis"][r, seg0 : seg0 + k, seg0 : seg0 + k] = u.vis
            cols["loss_mask"][r, sl] = u.loss_mask
            cols["behaviour_logp"][r, sl] = u.behaviour_logp
            cols["episode"][r, sl] = np.where(u.loss_mask, e, -1)
            cols["token_order"][r, sl] = u.token_order
            pos += n
            seg0 += k
    return cols


def build_rows(
    episodes: Sequence[Any], policy: ContextPolicy, mode: str, max_tokens_per_row: int, pad_id: int
) -> dict[str, np.ndarray]:
    """Episodes -> one row batch (all rows of this training iteration)."""
    units = episode_units(episodes, policy, mode)
    if not units:
        raise ValueError("no episode has a generated turn; nothing to train on")
    return collate(units, pack_rows(units, max_tokens_per_row), pad_id)


def slice_rows(cols: dict[str, np.ndarray], index: Sequence[int]) -> dict[str, np.ndarray]:
    """A sub-batch of rows, trimmed to its own longest row and segment count."""
    sub = {k: v[np.asarray(index)] for k, v in cols.items()}
    # Real tokens fill a prefix of each row; the rest is the padding segment (the last one).
    real = sub["seg"] != sub["vis"].shape[1] - 1
    t = max(1, int(real.sum(1).max()))
    for k, v in sub.items():
        if k != "vis" and v.ndim == 2:
            sub[k] = v[:, :t]
    return sub


def row_lengths(cols: dict[str, Any]) -> np.ndarray:
    """(B,) real tokens of each row (numpy arrays or tensors; padding is the last segment)."""
    seg, vis = cols["seg"], cols["vis"]
    real = seg != vis.shape[1] - 1
    lengths = real.sum(1)
    return lengths.cpu().numpy() if hasattr(lengths, "cpu") else np.asarray(lengths)


def micro_batches(lengths: Sequence[int], token_budget: int) -> list[list[int]]:
    """Consecutive groups of row indices holding at most ``token_budget`` tokens each (counted
    as rows x the group's longest row, what a padded forward pass computes); a row longer than
    the budget is a group of its own."""
    groups: list[list[int]] = []
    longest = 0
    for i, n in enumerate(lengths):
        n = int(n)
        if groups and max(longest, n) * (len(groups[-1]) + 1) <= token_budget:
            groups[-1].append(i)
            longest = max(longest, n)
        else:
            groups.append([i])
            longest = n
    return groups


def shard_rows(lengths: Sequence[int], num_shards: int) -> list[list[int]]:
    """Row indices split over ``num_shards`` learners with about equal tokens each (longest row
    first, each to the least loaded shard); a shard may be empty when rows are fewer."""
    shards: list[list[int]] = [[] for _ in range(num_shards)]
    load = [0] * num_shards
    for i in sorted(range(len(lengths)), key=lambda i: -int(lengths[i])):
        k = int(np.argmin(load))
        shards[k].append(i)
        load[k] += int(lengths[i])
    return [sorted(s) for s in shards]
