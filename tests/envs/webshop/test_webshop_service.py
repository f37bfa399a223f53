"""The WebShop world served to env runners by a named Ray actor (real local Ray)."""

from __future__ import annotations

import pytest

from memrl.envs.webshop import ScriptedShopper, WebShopEnv


def _play(env: WebShopEnv, task_index: int) -> float:
    env.reset(options={"task_index": task_index})
    shopper = ScriptedShopper(env.engine)
    reward = 0.0
    while not env.session.done:
        for action in shopper.plan(env.session):
            _, reward, term, trunc, _ = env.step(
                f"<think>t</think><summary>s</summary><answer>{action}</answer>"
            )
            if term or trunc:
                return reward
    return reward


@pytest.mark.slow
def test_named_actor_serves_one_world_to_many_envs():
    import ray

    from memrl.envs.webshop.service import RemoteWorld
    from memrl.envs.webshop.world import CatalogueSpec

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        config = {"split": "test", "num_products": 500, "seed": 1}
        remote_a = WebShopEnv(backend="ray", service_name="ws_test", **config)
        remote_b = WebShopEnv(backend="ray", service_name="ws_test", **config)
        assert remote_a.world.actor._actor_id == remote_b.world.actor._actor_id
        assert ray.util.list_named_actors() == ["ws_test"]
        local = WebShopEnv(backend="local", **config)
        for i in (0, 7):
            assert _play(remote_a, i) == _play(local, i)
        assert remote_b.world.search("shampoo") == local.world.search("shampoo")
        with pytest.raises(ValueError, match="serves CatalogueSpec"):
            RemoteWorld.connect(CatalogueSpec(num_products=600, seed=1), name="ws_test")
    finally:
        ray.shutdown()
    with pytest.raises(ValueError, match="needs a running Ray"):
        WebShopEnv(backend="ray", num_products=500, seed=1)
