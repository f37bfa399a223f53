"""Experiment configs: parsing, overrides and the errors a user sees."""

from __future__ import annotations

from pathlib import Path

import pytest

from memrl.experiment.build import build_algorithm_config, check_resources
from memrl.experiment.config import ExperimentConfig, apply_overrides, load_config, parse_config
from memrl.methods.baselines import LSTMModel
from memrl.methods.ppo import PPOSettings

REPO = Path(__file__).resolve().parents[2]


def test_defaults_and_tagged_sections():
    exp = parse_config({"name": "x", "model": {"type": "lstm", "lstm_cell_size": 32}})
    assert isinstance(exp, ExperimentConfig)
    assert isinstance(exp.algorithm, PPOSettings) and isinstance(exp.model, LSTMModel)
    assert exp.model.lstm_cell_size == 32
    d = exp.to_dict()
    assert d["algorithm"]["name"] == "ppo" and d["model"]["type"] == "lstm"
    assert parse_config(d) == exp  # the resolved config round-trips


@pytest.mark.parametrize(
    ("data", "error", "message"),
    [
        ({"foo": 1}, ValueError, r"Unknown key\(s\) foo\. Allowed keys of the config: \["),
        ({"run": {"stop_iter": 3}}, ValueError, r"run\.stop_iter.*Allowed keys of run"),
        (
            {"resources": {"num_env_runners": "2"}},
            TypeError,
            r"resources\.num_env_runners must be an integer, got '2'",
        ),
        ({"algorithm": {"lr": "fast"}}, TypeError, r"algorithm\.lr must be a number"),
        ({"algorithm": {"name": "dqn"}}, ValueError, r"Unknown algorithm\.name 'dqn'\. Available"),
        ({"model": {"type": "gru"}}, ValueError, r"Unknown model\.type 'gru'\. Available"),
        ({"model": {"type": "mlp", "hidden": [3]}}, ValueError, r"model\.hidden"),
        ({"algorithm": {"minibatch_size": 9000}}, ValueError, r"must not exceed"),
        ({"resources": {"rollout_fragment_length": "lots"}}, ValueError, r"'auto' or an int"),
        ({"env": {"fault_injection": {"step_error_probability": 2}}}, ValueError, r"\[0, 1\]"),
        ({"name": "a/b"}, ValueError, r"plain directory name"),
        ({"run": 3}, TypeError, r"run must be a mapping"),
    ],
)
def test_bad_values_name_the_key(data, error, message):
    with pytest.raises(error, match=message):
        parse_config(data)


def test_overrides_parse_yaml_values_and_create_paths():
    out = apply_overrides({"a": {"b": 1}}, ["a.b=2.5", "a.c=[1, 2]", "x.y.z=true", "s=hello"])
    assert out == {"a": {"b": 2.5, "c": [1, 2]}, "x": {"y": {"z": True}}, "s": "hello"}
    with pytest.raises(ValueError, match="key.path=value"):
        apply_overrides({}, ["nonsense"])
    with pytest.raises(ValueError, match="is not a mapping"):
        apply_overrides({"a": 3}, ["a.b=1"])


def test_exponent_floats_are_numbers_in_files_and_overrides(tmp_path):
    # YAML 1.1 reads 1e-4 (no dot, no exponent sign) as a string; users write it all the time,
    # and the CLI's own help shows --set algorithm.lr=1e-4.
    cfg = tmp_path / "exp.yaml"
    cfg.write_text(
        "env: {id: CartPole-v1}\nalgorithm: {name: ppo, lr: 3e-4, entropy_coeff: 1e-3}\n"
    )
    exp = load_config(cfg, ["algorithm.gamma=9.9e-1", "run.stop_timesteps=2e5"])
    assert exp.algorithm.lr == 3e-4 and exp.algorithm.entropy_coeff == 1e-3
    assert exp.algorithm.gamma == 0.99
    assert exp.run.stop_timesteps == 200_000 and isinstance(exp.run.stop_timesteps, int)
    assert load_config(cfg, ["algorithm.lr=1e-4"]).algorithm.lr == 1e-4
    with pytest.raises(TypeError, match="run.stop_timesteps must be an integer, got 2.5"):
        load_config(cfg, ["run.stop_timesteps=2.5"])
    out = apply_overrides({}, ["a=10", "b=1_000", "c=1e", "d=[1e-5, 1e-3]", "e=2026-11-30x"])
    assert out == {"a": 10, "b": 1000, "c": "1e", "d": [1e-5, 1e-3], "e": "2026-11-30x"}


def test_load_config_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ValueError, match="not valid YAML"):
        load_config(bad)
    listy = tmp_path / "list.yaml"
    listy.write_text("- 1\n- 2\n")
    with pytest.raises(ValueError, match="mapping at the top level"):
        load_config(listy)
    ok = tmp_path / "named_by_file.yaml"
    ok.write_text("run: {stop_iters: 3}\n")
    assert load_config(ok).name == "named_by_file"


def test_impossible_resources_are_refused():
    exp = parse_config({"resources": {"num_env_runners": 4}})
    with pytest.raises(ValueError, match=r"ask for 4 CPUs.*has 2.*at most 2 here"):
        check_resources(exp, cpus=2, gpus=0, where="this machine's Ray")
    gpu = parse_config({"resources": {"num_gpus_per_learner": 1, "num_env_runners": 0}})
    with pytest.raises(ValueError, match="ask for 1 GPUs but"):
        check_resources(gpu, cpus=2, gpus=0, where="x")
    check_resources(parse_config({"resources": {"num_env_runners": 2}}), 2, 0, where="x")


@pytest.mark.parametrize("path", sorted((REPO / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_configs_parse(path):
    exp = load_config(path)
    assert exp.name


def test_algorithm_config_carries_the_settings():
    exp = parse_config(
        {
            "env": {"config": {"size": 5}},
            "algorithm": {"lr": 1e-3, "train_batch_size": 1000, "minibatch_size": 100},
            "model": {"type": "lstm", "lstm_cell_size": 16, "max_seq_len": 10},
            "resources": {
                "num_env_runners": 2,
                "num_envs_per_env_runner": 3,
                "custom_resources_per_env_runner": {"browser": 1},
            },
            "fault_tolerance": {"max_num_env_runner_restarts": 7},
            "run": {"seed": 42},
        }
    )
    algo = build_algorithm_config(exp)
    assert algo.lr == 1e-3 and algo.train_batch_size_per_learner == 1000
    assert algo.minibatch_size == 100
    assert algo.num_env_runners == 2 and algo.num_envs_per_env_runner == 3
    assert algo.custom_resources_per_env_runner == {"browser": 1}
    assert algo.max_num_env_runner_restarts == 7 and algo.seed == 42
    assert algo.env == "memrl:memrl/DarkKeyToDoor-v0" and algo.env_config == {"size": 5}
    assert algo.model_config["use_lstm"] and algo.model_config["lstm_cell_size"] == 16


@pytest.mark.parametrize(
    "env, resources, fault, mode",
    [
        ({}, {}, {}, "vector_entry_point"),  # auto + a native vector env
        ({"id": "memrl/MemoryCorridor-v0"}, {}, {}, "vector_entry_point"),
        ({"id": "CartPole-v1"}, {}, {}, "sync"),  # auto, no native vector env
        ({}, {"env_vectorize_mode": "sync"}, {}, "sync"),
        ({}, {"env_vectorize_mode": "async"}, {}, "async"),
        ({}, {}, {"step_error_probability": 0.1}, "sync"),  # faults wrap single envs
    ],
)
def test_vectorize_mode(env, resources, fault, mode):
    exp = parse_config(
        {"env": {**env, "fault_injection": fault}, "resources": resources, "model": {"type": "mlp"}}
    )
    assert build_algorithm_config(exp).gym_env_vectorize_mode == mode


@pytest.mark.parametrize(
    "data, message",
    [
        (
            {
                "env": {"id": "CartPole-v1"},
                "resources": {"env_vectorize_mode": "vector"},
            },
            "has no native vectorized version",
        ),
        (
            {
                "env": {"fault_injection": {"step_error_probability": 0.1}},
                "resources": {"env_vectorize_mode": "vector"},
            },
            "fault_injection wraps single envs",
        ),
    ],
)
def test_vector_mode_errors_before_ray(data, message):
    from memrl.experiment.build import validate_env

    with pytest.raises(ValueError, match=message):
        validate_env(parse_config(data))


def test_env_creator_builds_the_native_vector_env():
    """What RLlib's env runner calls in vector_entry_point mode: num_envs in the context."""
    from memrl.envs.key_door import DarkKeyToDoorVectorEnv
    from memrl.experiment.build import env_creator
    from memrl.experiment.config import FaultInjection

    vec = env_creator("memrl/DarkKeyToDoor-v0", FaultInjection(), {"size": 4, "num_envs": 3})
    assert isinstance(vec, DarkKeyToDoorVectorEnv) and vec.num_envs == 3 and vec.size == 4
    with pytest.raises(ValueError, match="does not fit memrl/DarkKeyToDoor-v0"):
        env_creator("memrl/DarkKeyToDoor-v0", FaultInjection(), {"sizes": 4, "num_envs": 3})


@pytest.mark.parametrize(
    "env, expected",
    [
        ({}, False),  # memrl's envs have discrete actions: nothing to unsquash
        ({"id": "CartPole-v1"}, True),  # other envs: RLlib's default
        ({"normalize_actions": True}, True),
    ],
)
def test_normalize_actions(env, expected):
    exp = parse_config({"env": env, "model": {"type": "mlp"}})
    algo = build_algorithm_config(exp)
    assert algo.normalize_actions is expected and algo.clip_actions is False


@pytest.mark.parametrize(
    "env_id", ["memrl/DarkKeyToDoor-v0", "memrl/MemoryCorridor-v0", "memrl/ObjNav-v0"]
)
def test_embodied_envs_have_discrete_actions(env_id):
    """The premise of normalize_actions' default for memrl's envs."""
    import gymnasium as gym

    from memrl.envs import make_env

    env = make_env(env_id)
    assert isinstance(env.action_space, gym.spaces.Discrete)
    env.close()
