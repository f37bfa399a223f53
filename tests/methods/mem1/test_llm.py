"""The LLM policy: local tokenizer and tiny model, masks, log-prob equality, generation backends."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
import torch

from memrl.methods.mem1.context import (
    ContextPolicy,
    Turn,
    context_ids,
    packed_exact_unit,
    packed_unit,
    per_turn_units,
)
from memrl.methods.mem1.generation import GenerationSettings, make_backend
from memrl.methods.mem1.network import TokenPolicy, additive_mask
from memrl.methods.mem1.prompts import PromptSettings, render_observation, render_prompt
from memrl.methods.mem1.tiny import TinyModelSettings, build_tiny_model, build_tokenizer

PROMPT = PromptSettings()
TEXTS = [
    "What is the population of Poserno? Poserno has a population of 4978400.",
    "In which country was Fernosbil Thinmuntir born? The birthplace is Kalgorgu.",
    "Doc 1(Title: Kalgorgu) Kalgorgu lies in the country of Thorborgon.",
] * 10


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    tok = build_tokenizer(TEXTS, 400, PROMPT.all_tag_strings())
    lm = build_tiny_model(len(tok), TinyModelSettings(hidden_size=32, intermediate_size=64))
    return tok, lm


def test_tokenizer_is_lossless_and_tags_are_single_tokens(tiny):
    tok, _ = tiny
    text = "<think>Q1: 4978400; Q2: open.</think>\n<search>Poserno population</search> ünï"
    assert tok.decode(tok.encode(text)) == text
    for tag in ("<think>", "</think>", "<search>", "</search>", "<answer>", "</answer>"):
        assert len(tok.encode(tag)) == 1


def test_mask_is_additive_zero_or_minus_inf():
    seg = torch.tensor([[0, 0, 1, 1]])
    vis = torch.tensor([[[True, False], [False, True]]])
    m = additive_mask(seg, vis, torch.float32)
    assert m.shape == (1, 1, 4, 4)
    assert set(m.unique().tolist()) == {0.0, float("-inf")}
    assert (
        m[0, 0, 2, 1] == float("-inf") and m[0, 0, 3, 2] == 0.0 and m[0, 0, 0, 1] == float("-inf")
    )


def _episode(tok, num_turns=3):
    prompt_ids = tok.encode(render_prompt(PROMPT, "What is the population of Poserno?"))
    turns = []
    rng = np.random.default_rng(0)
    for t in range(num_turns):
        gen = rng.integers(10, len(tok), size=5).tolist()
        obs = tok.encode(render_observation(PROMPT, f"<information>Doc {t} Kalgorgu</information>"))
        turns.append(Turn(gen_ids=gen, obs_ids=obs if t < num_turns - 1 else []))
    return prompt_ids, turns


def _score(policy, unit):
    t = {k: torch.as_tensor(getattr(unit, k))[None] for k in ("input_ids", "position_ids", "seg")}
    vis = torch.as_tensor(unit.vis)[None]
    with torch.no_grad():
        return policy.score(t["input_ids"], t["position_ids"], t["seg"], vis)["logp"][0]


def _perturbed(unit, pos, vocab):
    import copy

    changed = copy.copy(unit)
    changed.input_ids = unit.input_ids.copy()
    changed.input_ids[pos] = (changed.input_ids[pos] + 7) % vocab
    return changed


def test_masked_positions_have_no_influence(tiny):
    """Perturb a token that a turn must not see: that turn's outputs do not move at all.

    One layer, so that only direct attention carries influence (with more layers, packed mode lets
    gen_2 see gen_1, whose packed hidden states saw obs_0: the documented packed approximation).
    """
    tok, _ = tiny
    lm = build_tiny_model(
        len(tok), TinyModelSettings(hidden_size=32, intermediate_size=64, num_layers=1)
    )
    policy = TokenPolicy(lm, value_head=False).eval()
    prompt_ids, turns = _episode(tok)
    unit = packed_unit(ContextPolicy("mem1"), prompt_ids, turns)
    base = _score(policy, unit)
    gen2 = np.nonzero(unit.loss_mask)[0][-5:]  # turn 2's generated tokens
    assert {int(unit.seg[i]) for i in gen2} == {5}  # prompt, gen_0, obs_0, gen_1, obs_1, gen_2
    obs0 = np.nonzero(unit.seg == 2)[0]
    obs1 = np.nonzero(unit.seg == 4)[0]
    assert len(obs0) and len(obs1)
    for pos in obs0:
        delta = (_score(policy, _perturbed(unit, pos, len(tok))) - base)[gen2].abs().max()
        assert delta.item() == 0.0
    delta = (_score(policy, _perturbed(unit, obs1[0], len(tok))) - base)[gen2].abs().max()
    assert delta.item() > 1e-4


def test_packed_rows_isolate_units_and_the_future(tiny):
    """Two turns packed in one row (per_turn mode): neither sees the other; no token sees ahead."""
    from memrl.methods.mem1.batch import collate, pack_rows

    tok, lm = tiny
    policy = TokenPolicy(lm, value_head=False).eval()
    prompt_ids, turns = _episode(tok, num_turns=2)
    units = [(0, u) for u in per_turn_units(ContextPolicy("mem1"), prompt_ids, turns)]
    rows = pack_rows(units, max_tokens_per_row=10_000)
    assert len(rows) == 1
    cols = collate(units, rows, pad_id=tok.pad_token_id)

    def score(c):
        t = {k: torch.as_tensor(c[k]) for k in ("input_ids", "position_ids", "seg", "vis")}
        with torch.no_grad():
            return policy.score(t["input_ids"], t["position_ids"], t["seg"], t["vis"])["logp"][0]

    base = score(cols)
    first = cols["seg"][0] == cols["seg"][0, 0]
    n_first = int(first.sum())
    changed = {k: v.copy() for k, v in cols.items()}
    changed["input_ids"][0, 0] = (changed["input_ids"][0, 0] + 5) % len(tok)
    delta = (score(changed) - base).abs()
    # The other unit is untouched (its first token's "log-prob" reads the previous unit's last
    # logits, as any row start does; it is a prompt token, never in the loss).
    assert delta[n_first + 1 :].max().item() == 0.0
    assert not cols["loss_mask"][0, n_first]
    assert delta[1:n_first].max().item() > 1e-4
    changed = {k: v.copy() for k, v in cols.items()}
    changed["input_ids"][0, 10] = (changed["input_ids"][0, 10] + 5) % len(tok)
    assert (score(changed) - base)[:10].abs().max().item() == 0.0  # the past ignores the future
    # Each unit's log-probs equal those of the unit scored alone.
    for (_, u), sl in ((units[rows[0][0]], slice(0, n_first)),):
        np.testing.assert_allclose(base[sl].numpy(), _score(policy, u).numpy(), atol=1e-5)


def test_packed_exact_hides_what_a_turn_never_saw_through_every_layer(tiny):
    """Three layers, MEM1 context: turn 2 saw neither obs_0 nor gen_0. In packed_exact mode its
    log-probs stay bit-identical when those tokens change (any number of layers); in packed mode
    they move, since gen_1's packed hidden states saw obs_0 (the documented approximation)."""
    tok, _ = tiny
    lm = build_tiny_model(
        len(tok), TinyModelSettings(hidden_size=32, intermediate_size=64, num_layers=3)
    )
    policy = TokenPolicy(lm, value_head=False).eval()
    prompt_ids, turns = _episode(tok)
    pol = ContextPolicy("mem1")
    exact = packed_exact_unit(pol, prompt_ids, turns)
    gen2 = np.nonzero(exact.loss_mask)[0][-5:]
    base = _score(policy, exact)
    # gen_0, obs_0 and gen_1 as generated; turn 2 reads a re-encoded copy of gen_1 instead
    unseen = np.nonzero(~exact.vis[exact.seg[gen2[0]]][exact.seg])[0]
    hidden = (turns[0].gen_ids, turns[0].obs_ids, turns[1].gen_ids)
    assert len(unseen) == sum(len(x) for x in hidden)
    for pos in unseen:
        delta = (_score(policy, _perturbed(exact, pos, len(tok))) - base)[gen2].abs().max()
        assert delta.item() == 0.0, f"token {pos} reached turn 2"
    # what turn 2 does see (the re-encoded gen_1 and obs_1 just before it) moves it
    seen = gen2[0] - 1
    assert (_score(policy, _perturbed(exact, seen, len(tok))) - base)[gen2].abs().max() > 1e-4
    # packed: obs_0 reaches turn 2 through gen_1's hidden states in the layers above the first
    packed = packed_unit(pol, prompt_ids, turns)
    p_gen2 = np.nonzero(packed.loss_mask)[0][-5:]
    obs0 = np.nonzero(packed.seg == 2)[0]
    p_base = _score(policy, packed)
    moved = (_score(policy, _perturbed(packed, obs0[0], len(tok))) - p_base)[p_gen2].abs().max()
    assert moved.item() > 0.0


def test_per_turn_recomputes_behaviour_logps_and_packed_gap_is_small(tiny):
    """Batched, left-padded generation vs one learner pass: per_turn and packed_exact match to
    1e-4 (float32); packed matches on the first turn and under the full context policy, and
    differs on later MEM1 turns (its approximation)."""
    import copy

    tok, lm = tiny
    # Larger weights than the random init's, so that a token's hidden state depends clearly on
    # what it attends to (near-uniform attention would hide packed mode's approximation).
    lm = copy.deepcopy(lm)
    with torch.no_grad():
        for name, p in lm.named_parameters():
            if p.ndim == 2 and "embed" not in name:
                p.mul_(8.0)
    backend = make_backend(GenerationSettings(temperature=1.0, seed=1), lm, tok)
    policy = TokenPolicy(lm, value_head=False).eval()
    questions = ["What is the population of Poserno?", "Where was Fernosbil born?", "Kalgorgu?"]
    prompts = [tok.encode(render_prompt(PROMPT, q)) for q in questions]
    gaps = {}
    for name in ("mem1", "full"):
        pol = ContextPolicy(name)
        episodes = [[] for _ in questions]
        for j in range(3):
            ctxs = [context_ids(pol, p, e, j) for p, e in zip(prompts, episodes, strict=True)]
            gens = backend.generate(ctxs, [PROMPT.stop_strings(False)] * 3, 8)
            for e, g in zip(episodes, gens, strict=True):
                obs = tok.encode(render_observation(PROMPT, f"<information>turn {j}</information>"))
                e.append(Turn(gen_ids=g.ids, logps=g.logps, obs_ids=obs))
        layouts = {
            "per_turn": lambda p, e, pol=pol: per_turn_units(pol, p, e),
            "packed": lambda p, e, pol=pol: [packed_unit(pol, p, e)],
            "packed_exact": lambda p, e, pol=pol: [packed_exact_unit(pol, p, e)],
        }
        for p, e in zip(prompts, episodes, strict=True):
            e[-1].obs_ids = []
            first_turn = len(e[0].gen_ids)
            for mode, layout in layouts.items():
                for u in layout(p, e):
                    lp = _score(policy, u).numpy()
                    gap = np.abs(lp[u.loss_mask] - u.behaviour_logp[u.loss_mask])
                    turn0 = u.token_order[u.loss_mask] < first_turn
                    for part, values in (("first", gap[turn0]), ("later", gap[~turn0])):
                        key = (name, mode, part)
                        if values.size:
                            gaps[key] = max(gaps.get(key, 0.0), float(values.max()))
    print(f"log-prob gap vs rollout: {gaps}")
    for (name, mode, part), gap in gaps.items():
        if mode == "packed" and name == "mem1" and part == "later":
            assert gap > 1e-3, "packed MEM1 turns should differ from the rollout"
        else:
            assert gap < 1e-4, f"{name} {mode} {part}: {gap}"


def test_chunked_logps_equal_full_logits_with_gradients(tiny):
    tok, lm = tiny
    torch.manual_seed(0)
    chunked = TokenPolicy(lm, value_head=True, logp_chunk_tokens=7)
    full = TokenPolicy(lm, value_head=True, full_logits=True)
    full.value_head.load_state_dict(chunked.value_head.state_dict())
    ids = torch.randint(0, len(tok), (2, 30))
    pos = torch.arange(30).repeat(2, 1)
    seg = torch.zeros((2, 30), dtype=torch.long)
    vis = torch.ones((2, 1, 1), dtype=torch.bool)
    want = torch.rand(2, 30) > 0.5
    a = chunked.score(ids, pos, seg, vis, with_values=True, logp_mask=want)
    b = full.score(ids, pos, seg, vis, with_values=True)
    torch.testing.assert_close(a["logp"][want], b["logp"][want], atol=1e-5, rtol=1e-5)
    assert not a["logp"][~want].any()  # no logits are spent where no log-prob is asked for
    torch.testing.assert_close(a["values"], b["values"])
    a["logp"][want].sum().backward()
    grads = [p.grad.clone() for p in lm.parameters()]
    lm.zero_grad()
    b["logp"][want].sum().backward()
    for g, h in zip(grads, [p.grad for p in lm.parameters()], strict=True):
        torch.testing.assert_close(g, h, atol=1e-5, rtol=1e-4)
    lm.zero_grad()


@pytest.mark.parametrize("alone", [True, False])
def test_head_logp_gradients_match_autograd_and_accumulate_in_place(monkeypatch, alone):
    import memrl.methods.mem1.network as network

    monkeypatch.setattr(network, "rank_and_world", lambda: (0, 1 if alone else 2))
    torch.manual_seed(0)
    hidden = torch.randn(11, 8, requires_grad=True)
    weight = torch.nn.Parameter(torch.randn(50, 8))
    target = torch.randint(0, 50, (11,))
    coef = torch.randn(11)

    def reference() -> tuple[torch.Tensor, ...]:
        logits = (hidden @ weight.T) / 0.7
        logp = logits.log_softmax(-1).gather(-1, target[:, None])[:, 0]
        return torch.autograd.grad((logp * coef).sum(), (hidden, weight)) + (logp.detach(),)

    want_h, want_w, want_logp = reference()
    logp = network.HeadLogp.apply(hidden, weight, target, 4, 0.7)
    torch.testing.assert_close(logp, want_logp)
    (logp * coef).sum().backward()
    torch.testing.assert_close(hidden.grad, want_h)
    torch.testing.assert_close(weight.grad, want_w)
    buffer = weight.grad.data_ptr()
    # A second pass adds to the gradient (micro-batches accumulate), in the same buffer.
    (network.HeadLogp.apply(hidden, weight, target, 4, 0.7) * coef).sum().backward()
    torch.testing.assert_close(weight.grad, 2 * want_w)
    assert weight.grad.data_ptr() == buffer


def test_head_logp_leaves_a_frozen_weight_alone():
    from memrl.methods.mem1.network import HeadLogp

    hidden = torch.randn(5, 4, requires_grad=True)
    weight = torch.nn.Parameter(torch.randn(9, 4), requires_grad=False)
    HeadLogp.apply(hidden, weight, torch.arange(5), 2, 1.0).sum().backward()
    assert weight.grad is None and hidden.grad is not None


def _stop_model(tok, lm, token: str):
    """A copy of the tiny model whose output always favours ``token`` (a real model change)."""
    import copy

    model = copy.deepcopy(lm)
    head = torch.nn.Linear(model.config.hidden_size, len(tok), bias=True)
    torch.nn.init.zeros_(head.weight)
    torch.nn.init.zeros_(head.bias)
    head.bias.data[tok.convert_tokens_to_ids(token)] = 50.0
    model.lm_head = head
    return model


def test_hf_backend_stops_per_prompt_and_keeps_the_stop_string(tiny):
    tok, lm = tiny
    model = _stop_model(tok, lm, "</search>")
    backend = make_backend(GenerationSettings(temperature=1.0), model, tok)
    prompts = [tok.encode("Question one"), tok.encode("a much longer second question here")]
    batch_sizes = []
    hook = model.register_forward_pre_hook(
        lambda _, args, kwargs: batch_sizes.append(kwargs["input_ids"].shape[0]),
        with_kwargs=True,
    )
    try:
        out = backend.generate(prompts, [["</search>", "</answer>"], ["</answer>"]], 4)
    finally:
        hook.remove()
    assert out[0].finish_reason == "stop" and out[0].text == "</search>" and len(out[0].ids) == 1
    assert out[1].finish_reason == "length" and len(out[1].ids) == 4
    assert all(len(o.ids) == len(o.logps) for o in out)
    assert out[0].logps[0] > -1e-3  # the biased token has probability ~1
    assert batch_sizes == [2, 1, 1, 1]  # the finished row left the batch (and its KV cache)


class _DecodeSpy:
    """The real tokenizer, recording how many ids each ``decode`` call gets."""

    def __init__(self, tokenizer):
        self._tok = tokenizer
        self.calls: list[int] = []

    def decode(self, ids, **kwargs):
        self.calls.append(len(ids))
        return self._tok.decode(ids, **kwargs)

    def __getattr__(self, name):
        return getattr(self._tok, name)


def test_hf_backend_matches_stop_strings_on_the_new_tail_only(tiny):
    tok, lm = tiny
    model = _stop_model(tok, lm, "</search>")
    spy = _DecodeSpy(tok)
    backend = make_backend(GenerationSettings(temperature=1.0), model, spy)
    stops = [["</search></search></search>"], ["</answer>"]]  # a stop spanning three tokens
    out = backend.generate([tok.encode("Question one"), tok.encode("Question two")], stops, 30)
    assert out[0].finish_reason == "stop" and out[0].text == "</search>" * 3
    assert out[1].finish_reason == "length" and len(out[1].ids) == 30
    during, final = spy.calls[:-2], spy.calls[-2:]  # the last two decode each whole output
    assert final == [3, 30]
    assert max(during) <= len(stops[0][0]) + 2  # never the whole text while generating
    assert len(backend._pieces) == 1  # the new token's text: decoded once, then cached


def test_hf_backend_ends_on_every_end_token_of_the_generation_config(tiny):
    import copy

    tok, lm = tiny
    model = _stop_model(tok, lm, "<|pad|>")
    pad = tok.convert_tokens_to_ids("<|pad|>")
    out = make_backend(GenerationSettings(), model, tok).generate([[5, 6]], [["</answer>"]], 5)
    assert out[0].finish_reason == "length"  # <|pad|> is not an end token yet
    model = copy.deepcopy(model)
    model.generation_config.eos_token_id = [tok.eos_token_id, pad]  # like Qwen's two
    out = make_backend(GenerationSettings(), model, tok).generate([[5, 6]], [["</answer>"]], 5)
    assert out[0].finish_reason == "eos" and out[0].ids == [pad] and out[0].text == ""


def test_hf_backend_keeps_one_position_of_logits_under_lora(tmp_path, tiny):
    from memrl.methods.mem1.network import LoRASettings, load_lm

    tok, lm = tiny
    lm.save_pretrained(tmp_path)
    peft_lm = load_lm(str(tmp_path), torch.float32, LoRASettings(enabled=True, r=2))
    positions = []
    head = peft_lm.get_base_model().lm_head
    hook = head.register_forward_hook(lambda _, args, out: positions.append(args[0].shape[1]))
    try:
        make_backend(GenerationSettings(), peft_lm, tok).generate([list(range(5, 40))], [[]], 3)
    finally:
        hook.remove()
    assert positions == [1, 1, 1]  # the 35-token prompt's logits were never all computed


class _CompletionsHandler(BaseHTTPRequestHandler):
    backend = None

    def do_POST(self):  # noqa: N802 - http.server API
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        assert self.path == "/v1/completions"
        stop = body.get("stop") or []
        greedy = body.get("temperature", 1.0) == 0.0
        g = self.backend.generate([body["prompt"]], [stop], body["max_tokens"], greedy=greedy)[0]
        reply = {
            "choices": [
                {
                    "text": g.text,
                    "finish_reason": "stop" if g.finish_reason == "stop" else "length",
                    "logprobs": {
                        "tokens": [f"token_id:{i}" for i in g.ids],
                        "token_logprobs": g.logps,
                    },
                }
            ]
        }
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_openai_backend_against_a_local_completions_server(tiny):
    tok, lm = tiny
    local = make_backend(GenerationSettings(), lm, tok)
    _CompletionsHandler.backend = local
    server = ThreadingHTTPServer(("127.0.0.1", 0), _CompletionsHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        remote = make_backend(GenerationSettings(backend="openai", base_url=url), lm, tok)
        prompt = tok.encode("What is the population of Poserno?")
        got = remote.generate([prompt], [["</answer>"]], 6, greedy=True)[0]
        want = local.generate([prompt], [["</answer>"]], 6, greedy=True)[0]
        assert got.ids == want.ids and got.text == want.text
        np.testing.assert_allclose(got.logps, want.logps, atol=1e-6)
    finally:
        server.shutdown()


def test_openai_backend_reports_a_dead_server(tiny):
    tok, lm = tiny
    server = ThreadingHTTPServer(("127.0.0.1", 0), _CompletionsHandler)
    port = server.server_address[1]
    server.server_close()
    backend = make_backend(
        GenerationSettings(backend="openai", base_url=f"http://127.0.0.1:{port}/v1"), lm, tok
    )
    with pytest.raises(ConnectionError, match="did not answer"):
        backend.generate([[1, 2]], [[]], 2)


def test_vllm_backend_names_the_extra_when_missing(tiny):
    pytest.importorskip("transformers")
    try:
        import vllm  # noqa: F401
    except ImportError:
        tok, lm = tiny
        with pytest.raises(ImportError, match=r"\.\[vllm\]"):
            make_backend(GenerationSettings(backend="vllm"), lm, tok)
    else:
        pytest.skip("vllm is installed: the GPU test covers it")


def test_llm_settings_parse_from_yaml_dict():
    from memrl.experiment.config import parse_config

    exp = parse_config(
        {
            "env": {"id": "memrl/DocQA-v0", "config": {"synthetic_passages": 50}},
            "algorithm": {"name": "mem1", "algorithm": "grpo", "group_size": 4},
            "model": {
                "type": "llm",
                "path": "tiny",
                "lora": {"enabled": True, "r": 4},
                "generation": {"backend": "hf", "temperature": 0.7},
            },
        }
    )
    assert type(exp.model).__name__ == "LLMModelSettings"
    assert exp.model.lora.r == 4 and exp.model.generation.temperature == 0.7
    assert exp.algorithm.group_size == 4
    with pytest.raises(ValueError, match="group_size"):
        parse_config({"algorithm": {"name": "mem1", "algorithm": "grpo", "group_size": 1}})
    with pytest.raises(ValueError, match="Unknown key"):
        parse_config({"model": {"type": "llm", "temprature": 1.0}})


def test_lora_module_syncs_only_adapters_and_reference_is_the_base(tmp_path, tiny):
    from memrl.methods.mem1.network import load_lm

    tok, lm = tiny
    lm.save_pretrained(tmp_path)
    from memrl.methods.mem1.network import LoRASettings

    peft_lm = load_lm(str(tmp_path), torch.float32, LoRASettings(enabled=True, r=2))
    trainable = {n for n, p in peft_lm.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    policy = TokenPolicy(peft_lm, value_head=True)
    ids = torch.tensor([[1, 2, 3, 4]])
    pos = torch.arange(4)[None]
    seg = torch.zeros((1, 4), dtype=torch.long)
    vis = torch.ones((1, 1, 1), dtype=torch.bool)
    with torch.no_grad():
        for n, p in peft_lm.named_parameters():
            if "lora_B" in n:
                p.add_(0.5)
        moved = policy.score(ids, pos, seg, vis)["logp"]
        with peft_lm.disable_adapter():
            base = policy.score(ids, pos, seg, vis)["logp"]
    plain = TokenPolicy(
        build_tiny_model(len(tok), TinyModelSettings(hidden_size=32, intermediate_size=64)),
        value_head=False,
    )
    plain.lm.load_state_dict(lm.state_dict())
    with torch.no_grad():
        ref = plain.score(ids, pos, seg, vis)["logp"]
    torch.testing.assert_close(base, ref)
    assert (moved - base).abs().max() > 1e-4


def test_activation_checkpointing_keeps_the_gradients(tmp_path, tiny):
    from memrl.methods.mem1.network import load_lm

    tok, lm = tiny
    lm.save_pretrained(tmp_path)
    grads = []
    for checkpointing in (False, True):
        model = load_lm(str(tmp_path), torch.float32, activation_checkpointing=checkpointing)
        assert model.is_activation_checkpointing == checkpointing
        policy = TokenPolicy(model, value_head=False).train()
        ids = torch.randint(0, len(tok), (2, 24), generator=torch.Generator().manual_seed(0))
        pos = torch.arange(24).repeat(2, 1)
        out = policy.score(ids, pos, torch.zeros_like(ids), torch.ones((2, 1, 1), dtype=torch.bool))
        out["logp"].sum().backward()
        grads.append([p.grad for p in model.parameters()])
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b)


def _three_layer_folder(tmp_path, tok):
    torch.manual_seed(1)
    shape = TinyModelSettings(hidden_size=32, intermediate_size=64, num_layers=3)
    build_tiny_model(len(tok), shape).save_pretrained(tmp_path)
    return str(tmp_path)


def test_frozen_lower_layers_get_no_gradient_and_the_rest_the_full_one(tmp_path, tiny):
    from memrl.methods.mem1.network import load_lm

    tok, _ = tiny
    folder = _three_layer_folder(tmp_path, tok)
    ids = torch.randint(0, len(tok), (2, 20), generator=torch.Generator().manual_seed(0))
    pos = torch.arange(20).repeat(2, 1)
    seg, vis = torch.zeros_like(ids), torch.ones((2, 1, 1), dtype=torch.bool)
    grads = {}
    for frozen in (0, 2):
        model = load_lm(folder, torch.float32, freeze_layers=frozen)
        TokenPolicy(model, value_head=False).score(ids, pos, seg, vis)["logp"].sum().backward()
        grads[frozen] = {n: p.grad for n, p in model.named_parameters()}
        trainable = {n for n, p in model.named_parameters() if p.requires_grad}
        if frozen:
            assert not any(n.startswith(("model.embed_tokens", "model.layers.0.",
                                         "model.layers.1.")) for n in trainable)  # fmt: skip
            assert any(n.startswith("model.layers.2.") for n in trainable)
    for name, grad in grads[2].items():
        if name.startswith(("model.layers.0.", "model.layers.1.", "model.embed_tokens")):
            assert grad is None, name
        else:  # what trains gets exactly the gradient it gets when nothing is frozen
            torch.testing.assert_close(grad, grads[0][name], msg=name)


def test_lora_over_frozen_layers_adapts_only_the_layers_above(tmp_path, tiny):
    from memrl.methods.mem1.network import LoRASettings, load_lm

    tok, _ = tiny
    folder = _three_layer_folder(tmp_path, tok)
    model = load_lm(folder, torch.float32, LoRASettings(enabled=True, r=2), freeze_layers=2)
    adapted = {n.split(".layers.")[1].split(".")[0] for n, _ in model.named_parameters()
               if "lora_" in n}  # fmt: skip
    assert adapted == {"2"}
    assert all("lora_" in n for n, p in model.named_parameters() if p.requires_grad)


def test_freezing_every_layer_is_refused(tmp_path, tiny):
    from memrl.experiment.config import parse_config
    from memrl.methods.mem1.network import load_lm

    tok, _ = tiny
    folder = _three_layer_folder(tmp_path, tok)
    with pytest.raises(ValueError, match=r"freeze_layers must be in \[0, 2\]"):
        load_lm(folder, torch.float32, freeze_layers=3)
    exp = parse_config(
        {
            "name": "frozen",
            "env": {"id": "memrl/DocQA-v0", "config": {"synthetic_passages": 60}},
            "algorithm": {"name": "mem1"},
            "model": {"type": "llm", "path": folder, "freeze_layers": 3},
        }
    )
    with pytest.raises(ValueError, match="has 3 decoder layers: freeze at most 2"):
        exp.model.model_config(exp)
