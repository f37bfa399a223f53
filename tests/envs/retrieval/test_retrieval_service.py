"""The shared Ray retrieval service, used by two env runners at once (real local Ray)."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")

from memrl.envs.retrieval.service import RayRetriever, start_retrieval_service  # noqa: E402

pytestmark = pytest.mark.slow

SPEC = {"synthetic_passages": 300, "seed": 0}


@pytest.fixture(scope="module")
def ray_cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@ray.remote(num_cpus=0.5)
class EnvRunner:
    """Stands in for an env runner: it owns envs and steps them with the scripted agent."""

    def __init__(self, service: str) -> None:
        from memrl.envs.doc_qa import DocQAEnv

        self.env = DocQAEnv(
            synthetic_passages=300, retriever="ray", ray_service=service, num_tasks=30
        )

    def play(self, indices: list[int]) -> list[float]:
        from memrl.envs.doc_qa.agent import ScriptedAgent, run_episode

        return [
            run_episode(self.env, ScriptedAgent(), options={"task_index": i})["em"] for i in indices
        ]

    def service_id(self) -> str:
        return self.env.retriever._actor()._actor_id.hex()


def test_two_env_runners_share_one_service(ray_cluster):
    handle = start_retrieval_service(SPEC, name="test_retrieval", num_cpus=1)
    again = start_retrieval_service(SPEC, name="test_retrieval", num_cpus=1)
    assert again._actor_id == handle._actor_id  # found by name, not built twice
    runners = [EnvRunner.remote("test_retrieval") for _ in range(2)]
    ids = ray.get([r.service_id.remote() for r in runners])
    assert ids == [handle._actor_id.hex()] * 2
    scores = ray.get([r.play.remote(list(range(k, 30, 2))) for k, r in enumerate(runners)])
    assert all(len(s) == 15 for s in scores)
    assert sum(em == 2.0 for s in scores for em in s) >= 27

    local = RayRetriever("test_retrieval").retrieve(["capital"], 2)
    assert len(local) == 1 and len(local[0]) == 2


def test_missing_service_is_explained(ray_cluster):
    with pytest.raises(ValueError, match="start_retrieval_service"):
        RayRetriever("no_such_service").retrieve(["x"], 1)
