"""Transcripts of text agents: tokens kept vs dropped per turn, and a reader that never fails."""

from __future__ import annotations

import json

from memrl.experiment.transcripts import read_transcripts, token_split, window_of


def test_mem1_drops_every_turn_but_the_last():
    # prompt 40; turn shares s0 = 30, s1 = 35, s2 = 25: MEM1 sees prompt + the latest turn only.
    contexts = [40, 70, 75, 65]
    # full history: 40, 70, 105, 130; kept = c_j; dropped = full - kept
    assert token_split(contexts, window_of("mem1")) == [(40, 0), (70, 0), (75, 30), (65, 65)]


def test_last_k_keeps_k_turns():
    # shares 30, 35, 25 again; last_k with k = 2 sees the prompt + two turns.
    contexts = [40, 70, 105, 100]
    assert token_split(contexts, window_of("last_k", 2)) == [(40, 0), (70, 0), (105, 0), (100, 30)]


def test_full_context_drops_nothing():
    assert token_split([40, 70, 105], window_of("full")) == [(40, 0), (70, 0), (105, 0)]


def test_reader_tolerates_missing_fields_bad_lines_and_uses_given_counts(tmp_path):
    path = tmp_path / "t.jsonl"
    lines = [
        json.dumps({"task_id": "a", "turns": [{"generated": "x"}], "em": 1}),  # no token counts
        "this is not json",
        json.dumps(
            {
                "turns": [
                    {
                        "generated": "g0",
                        "context_tokens": 10,
                        "kept_tokens": 9,
                        "dropped_tokens": 4,
                    },
                    {"action": "g1", "observation": "o1", "context_tokens": 12},
                ],
                "reward": 0.5,
                "peak_tokens": 30,
                "em": float("nan"),
            }
        ),
        json.dumps([1, 2]),  # not an episode
        "",
    ]
    path.write_text("\n".join(lines))
    out = read_transcripts(path, policy="mem1")
    assert out["total"] == 2
    first, second = out["episodes"]
    assert first["id"] == "a" and first["outcome"] == {"em": 1.0}
    assert first["turns"][0]["kept_tokens"] is None and first["prompt"] == ""
    assert second["id"] == "1"  # its position among the episodes
    assert second["outcome"] == {"reward": 0.5} and second["memory"] == {"peak_tokens": 30.0}
    assert second["turns"][0]["kept_tokens"] == 9 and second["turns"][0]["dropped_tokens"] == 4
    assert second["turns"][1]["generated"] == "g1" and second["turns"][1]["kept_tokens"] == 12


def test_reader_keeps_at_most_limit_episodes_and_counts_all(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps({"task_id": str(i), "turns": []}) for i in range(7)))
    out = read_transcripts(path, limit=3)
    assert out["total"] == 7 and [e["id"] for e in out["episodes"]] == ["0", "1", "2"]
