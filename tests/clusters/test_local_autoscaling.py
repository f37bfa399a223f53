"""clusters/local.yaml for real: Ray's fake multi-node provider scales a browser node type up for a
config that asks for browser env runners, and back down once idle.

The head is started as clusters/README.md tells users to (`RAY_FAKE_CLUSTER=1 ray start --head
--autoscaling-config=clusters/local.yaml`, token auth), with two changes for a shared test machine:
the GCS on a free port instead of 6379 (the fake provider is told so in `provider.gcs_address`),
and the autoscaler polling every second instead of five. The run is submitted with
`ray job submit` and the same `memrl train` command as on a laptop.
"""

from __future__ import annotations

import json
import time

import pytest
import yaml
from local_cluster import free_ports, local_cluster, wait_for
from memrl_testing import REPO, write_config

pytestmark = pytest.mark.slow


def _browser_nodes(cluster, state: str = "ALIVE") -> list[dict]:
    return [
        n
        for n in cluster.state("nodes", f"state={state}")
        if "browser" in n.get("resources_total", {})
    ]


def test_browser_runners_scale_a_browser_node_up_and_idle_scales_it_down(tmp_path):
    config = yaml.safe_load((REPO / "clusters" / "local.yaml").read_text())
    (port,) = free_ports(1)
    config["provider"]["gcs_address"] = f"127.0.0.1:{port}"
    autoscaling = tmp_path / "local.yaml"
    autoscaling.write_text(yaml.safe_dump(config))
    head_cpus = config["available_node_types"]["ray.head.default"]["resources"]["CPU"]
    cfg = write_config(
        tmp_path / "browser.yaml",
        name="browser",
        resources={
            "num_env_runners": 1,
            "num_envs_per_env_runner": 2,
            "custom_resources_per_env_runner": {"browser": 1},
        },
        run={"stop_iters": 3, "checkpoint_every": 3},
    )
    with local_cluster("mrla-") as cluster:
        cluster.start_head(
            num_cpus=head_cpus,
            autoscaling_config=str(autoscaling),
            env={"RAY_FAKE_CLUSTER": "1", "AUTOSCALER_UPDATE_INTERVAL_S": "1"},
            port=port,
        )
        assert _browser_nodes(cluster) == []  # min_workers 0: nothing runs before it is asked
        submitted = time.time()
        cluster.submit(
            "browser",
            ["memrl", "train", str(cfg), "--output", str(tmp_path / "run")],
            cwd=REPO,
        )
        (node,) = wait_for(lambda: _browser_nodes(cluster), 300, "a browser node", every=2)
        scaled_up_s = time.time() - submitted
        status, logs = cluster.wait_job("browser", timeout=600)
        assert status == "SUCCEEDED", logs[-3000:]
        assert "iter 3/3" in logs
        ended = time.time()
        # The env runner ran on the node the autoscaler started for it (Ray's state API).
        runners = [
            a
            for a in cluster.state("actors")
            if a.get("class_name", "").endswith("EnvRunner")  # RLlib's or memrl's bulk one
        ]
        assert [a["node_id"] for a in runners] == [node["node_id"]]
        assert node["resources_total"]["browser"] == 2  # the browser_env_runner type's
        # Idle for idle_timeout_minutes: the autoscaler stops it again.
        idle_s = 60 * config["idle_timeout_minutes"]
        wait_for(lambda: not _browser_nodes(cluster), idle_s + 120, "the scale-down", every=2)
        scaled_down_s = time.time() - ended
    print(
        "\nFIGURES "
        + json.dumps(
            {
                "scale_up_s": round(scaled_up_s, 1),
                "scale_down_after_job_s": round(scaled_down_s, 1),
                "idle_timeout_s": idle_s,
            }
        )
    )
