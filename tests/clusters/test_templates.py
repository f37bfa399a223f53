"""The cluster templates in clusters/ validate against the schemas their tools use.

- Ray cluster-launcher YAMLs against ``ray/autoscaler/ray-schema.json`` of the installed ray (and
  local.yaml, used as it is by the autoscaler, against Ray's full config check);
- KubeRay manifests against the v1 ``openAPIV3Schema`` of the RayCluster / RayJob CRDs (copied in
  tests/clusters/data/), with unknown fields rejected as ``kubectl apply --validate=strict`` does;
- every template against the one list of node types (clusters/node_types.yaml): the same types,
  the same custom resources, GPUs where the list says;
- and what users need of them: the pinned Ray version, memrl installed by the setup, habitat-sim
  from conda, Chrome on browser nodes, token auth, comments, no secrets.
"""

from __future__ import annotations

import copy
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import ray
import yaml
from memrl_testing import REPO

CLUSTERS = REPO / "clusters"
DATA = Path(__file__).parent / "data"
CLOUD_FILES = [CLUSTERS / "aws.yaml", CLUSTERS / "gcp.yaml"]
LAUNCHER_FILES = [*CLOUD_FILES, CLUSTERS / "local.yaml"]
NODE_TYPES = CLUSTERS / "node_types.yaml"
KUBERAY_FILES = sorted((CLUSTERS / "kuberay").glob("*.yaml"))
CRDS = {"RayCluster": "ray.io_rayclusters.crd.yaml", "RayJob": "ray.io_rayjobs.crd.yaml"}
Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load(path: Path) -> dict[str, Any]:
    return yaml.load(path.read_text(), Loader=Loader)


@cache
def launcher_schema() -> dict[str, Any]:
    return json.loads((Path(ray.__file__).parent / "autoscaler" / "ray-schema.json").read_text())


def strict(schema: Any) -> Any:
    """The schema with ``additionalProperties: false`` wherever it lists properties.

    A CRD's structural schema lets Kubernetes prune unknown fields silently; strict field
    validation (kubectl's default since 1.27) rejects them instead, and so does this.
    """
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@cache
def crd_validator(kind: str) -> jsonschema.Draft7Validator:
    crd = load(DATA / CRDS[kind])
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema = strict(version["schema"]["openAPIV3Schema"])
    # Kubernetes checks apiVersion/kind/metadata itself; the CRD leaves them open.
    schema["required"] = sorted({"apiVersion", "kind", "spec", *schema.get("required", [])})
    return jsonschema.Draft7Validator(schema)


def crd_errors(manifest: dict[str, Any]) -> list[str]:
    validator = crd_validator(manifest["kind"])
    return [
        f"{'/'.join(str(p) for p in e.absolute_path)}: {e.message}"
        for e in validator.iter_errors(manifest)
    ]


def launcher_errors(config: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft7Validator(launcher_schema())
    return [
        f"{'/'.join(str(p) for p in e.absolute_path)}: {e.message}"
        for e in validator.iter_errors(config)
    ]


def test_the_templates_exist():
    assert sorted(p.name for p in CLUSTERS.glob("*.yaml")) == [
        "aws.yaml",
        "gcp.yaml",
        "local.yaml",
        "node_types.yaml",
    ]
    assert [p.name for p in KUBERAY_FILES] == ["raycluster.yaml", "rayjob.yaml"]


@pytest.mark.parametrize("path", LAUNCHER_FILES, ids=lambda p: p.name)
def test_launcher_yaml_matches_rays_schema(path):
    config = load(path)
    assert launcher_errors(config) == []
    assert config["provider"]["type"] == {"local": "fake_multinode"}.get(path.stem, path.stem)


def test_local_yaml_is_a_complete_autoscaler_config():
    """`ray start --autoscaling-config` uses the file as it is (no defaults filled in)."""
    from ray.autoscaler._private.util import validate_config

    validate_config(load(CLUSTERS / "local.yaml"))
    broken = load(CLUSTERS / "local.yaml")
    broken["head_node_type"] = "head"  # the cloud templates' name: the fake provider's differs
    with pytest.raises(ValueError, match="head_node_type"):
        validate_config(broken)


def node_types() -> dict[str, Any]:
    return load(NODE_TYPES)


def _custom(resources: dict[str, Any]) -> list[str]:
    standard = {"CPU", "GPU", "memory", "object_store_memory"}
    return sorted(k for k in resources if k not in standard)


def launcher_type_errors(config: dict[str, Any], *, local: bool) -> list[str]:
    """How a launcher config's node types differ from clusters/node_types.yaml."""
    listed = node_types()
    head = listed["head"]["local_name" if local else "name"]
    types = config["available_node_types"]
    errors = []
    if config["head_node_type"] != head:
        errors.append(f"head_node_type is {config['head_node_type']!r}, expected {head!r}")
    if sorted(types) != sorted([head, *listed["workers"]]):
        errors.append(f"node types {sorted(types)} != {sorted([head, *listed['workers']])}")
    for name, spec in listed["workers"].items():
        resources = types.get(name, {}).get("resources", {})
        if _custom(resources) != sorted(spec["resources"]):
            errors.append(f"{name}: custom resources {_custom(resources)} != {spec['resources']}")
        if (resources.get("GPU", 0) >= 1) != (spec["gpu"] and not local):
            errors.append(f"{name}: GPU {resources.get('GPU', 0)}, listed gpu={spec['gpu']}")
    return errors


def kuberay_group_errors(manifest: dict[str, Any]) -> list[str]:
    listed = node_types()["workers"]
    groups = {g["groupName"]: g for g in _cluster_spec(manifest)["workerGroupSpecs"]}
    expected = {name.replace("_", "-"): spec for name, spec in listed.items()}
    errors = []
    if sorted(groups) != sorted(expected):
        errors.append(f"worker groups {sorted(groups)} != {sorted(expected)}")
    for name, spec in expected.items():
        group = groups.get(name, {})
        if sorted(group.get("resources", {})) != sorted(spec["resources"]):
            errors.append(f"{name}: resources {group.get('resources')} != {spec['resources']}")
        container = group.get("template", {}).get("spec", {}).get("containers", [{}])[0]
        has_gpu = "nvidia.com/gpu" in container.get("resources", {}).get("limits", {})
        ray_gpus = group.get("rayStartParams", {}).get("num-gpus", "1" if has_gpu else "0")
        if (ray_gpus != "0") != spec["gpu"]:
            errors.append(f"{name}: Ray sees GPUs {ray_gpus}, listed gpu={spec['gpu']}")
    return errors


@pytest.mark.parametrize("path", LAUNCHER_FILES, ids=lambda p: p.name)
def test_launcher_node_types_follow_the_one_list(path):
    assert launcher_type_errors(load(path), local=path.stem == "local") == []


@pytest.mark.parametrize("path", KUBERAY_FILES, ids=lambda p: p.name)
def test_kuberay_worker_groups_follow_the_one_list(path):
    assert kuberay_group_errors(load(path)) == []


def test_a_drifted_template_is_caught():
    aws = load(CLUSTERS / "aws.yaml")
    aws["available_node_types"]["browser_nodes"] = aws["available_node_types"].pop(
        "browser_env_runner"
    )
    assert any("node types" in e for e in launcher_type_errors(aws, local=False))
    local = load(CLUSTERS / "local.yaml")
    local["available_node_types"]["browser_env_runner"]["resources"]["chrome"] = 2
    assert any("browser_env_runner" in e for e in launcher_type_errors(local, local=True))
    local = load(CLUSTERS / "local.yaml")
    local["available_node_types"]["gpu_learner"]["resources"]["GPU"] = 1  # none on one machine
    assert any("gpu_learner: GPU" in e for e in launcher_type_errors(local, local=True))
    job = load(CLUSTERS / "kuberay" / "rayjob.yaml")
    job["spec"]["rayClusterSpec"]["workerGroupSpecs"][2]["resources"] = {"browsers": "4"}
    assert any("browser-env-runner" in e for e in kuberay_group_errors(job))


@pytest.mark.parametrize("path", CLOUD_FILES, ids=lambda p: p.name)
def test_launcher_node_types_and_setup(path):
    config = load(path)
    types = config["available_node_types"]
    head = types[config["head_node_type"]]
    assert head["resources"].get("GPU", 0) == 0 and head["resources"]["CPU"] >= 1
    gpu = types["gpu_learner"]
    cpu = types["cpu_env_runner"]
    habitat = types["habitat_env_runner"]
    assert gpu["resources"]["GPU"] >= 1 and cpu["resources"].get("GPU", 0) == 0
    for node_type in (gpu, cpu, habitat):
        assert 0 <= node_type["min_workers"] <= node_type["max_workers"]
    assert sum(t.get("max_workers", 0) for t in types.values()) <= config["max_workers"]
    # Habitat runners find their nodes by the custom resource the configs ask for.
    assert habitat["resources"]["habitat"] >= 1 and habitat["resources"]["GPU"] == 0
    # Pinned Ray: every image is the installed ray's version.
    images = [config["docker"]["image"]] + [
        t["docker"]["worker_image"] for t in types.values() if "docker" in t
    ]
    assert all(f"ray:{ray.__version__}-py311" in image for image in images), images
    # memrl with every extra is installed on every node (head, default workers, each override).
    command_lists = [config["head_setup_commands"], config["worker_setup_commands"]] + [
        t["worker_setup_commands"] for t in types.values() if "worker_setup_commands" in t
    ]
    for commands in command_lists:
        assert "pip install -q -e ~/memrl[all]" in commands, commands  # every extra
        assert any(c.startswith("pip install -q torch==2.13.0") for c in commands), commands
    habitat_setup = " ".join(habitat["worker_setup_commands"])
    assert "conda create -n habitat" in habitat_setup and "habitat-sim=" in habitat_setup
    assert "MEMRL_HABITAT_PYTHON" in habitat_setup
    # Browser nodes install Chrome with the script shipped in the checkout.
    browser_setup = types["browser_env_runner"]["worker_setup_commands"]
    assert "bash ~/memrl/clusters/install_browser.sh" in browser_setup
    assert (CLUSTERS / "install_browser.sh").is_file()
    # Token auth on every node, with the token file shipped by path.
    for commands in (config["head_start_ray_commands"], config["worker_start_ray_commands"]):
        assert any("RAY_AUTH_MODE=token" in c for c in commands), commands
    assert config["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"
    assert config["file_mounts"]["~/memrl"] == "."
    assert ".venv" in config["rsync_exclude"]


@pytest.mark.parametrize("path", KUBERAY_FILES, ids=lambda p: p.name)
def test_kuberay_manifest_matches_its_crd(path):
    manifest = load(path)
    assert manifest["apiVersion"] == "ray.io/v1"
    assert crd_errors(manifest) == []


def _cluster_spec(manifest: dict[str, Any]) -> dict[str, Any]:
    spec = manifest["spec"]
    return spec if manifest["kind"] == "RayCluster" else spec["rayClusterSpec"]


def test_kuberay_cluster_and_job_share_groups_auth_and_version():
    cluster, job = (load(CLUSTERS / "kuberay" / n) for n in ("raycluster.yaml", "rayjob.yaml"))
    assert cluster["kind"] == "RayCluster" and job["kind"] == "RayJob"
    specs = [_cluster_spec(cluster), _cluster_spec(job)]
    for spec in specs:
        assert spec["rayVersion"] == ray.__version__
        assert spec["authOptions"] == {"mode": "token"}
        groups = {g["groupName"]: g for g in spec["workerGroupSpecs"]}
        for g in groups.values():
            assert 0 <= g["minReplicas"] <= g["maxReplicas"]
        gpu_limits = groups["gpu-learner"]["template"]["spec"]["containers"][0]["resources"]
        assert gpu_limits["limits"]["nvidia.com/gpu"] == "1"
        assert groups["habitat-env-runner"]["resources"] == {"habitat": "4"}
    assert [g["groupName"] for g in specs[0]["workerGroupSpecs"]] == [
        g["groupName"] for g in specs[1]["workerGroupSpecs"]
    ]
    entry = job["spec"]["entrypoint"].split()
    assert entry[:2] == ["memrl", "train"]
    # The config it names ships in the image (the checkout at /home/ray/memrl).
    assert (REPO / Path(entry[2]).relative_to("/home/ray/memrl")).is_file()


def test_strict_crd_validation_catches_a_misspelled_field():
    manifest = load(CLUSTERS / "kuberay" / "raycluster.yaml")
    bad = copy.deepcopy(manifest)
    bad["spec"]["workerGroupSpecs"][0]["maxReplica"] = 4  # misspelled: would be pruned silently
    errors = crd_errors(bad)
    assert any("maxReplica" in e for e in errors), errors
    bad = copy.deepcopy(manifest)
    bad["spec"]["authOptions"]["mode"] = "password"
    assert any("authOptions/mode" in e for e in crd_errors(bad))


def test_launcher_schema_catches_a_misspelled_key():
    config = load(CLUSTERS / "aws.yaml")
    config["available_node_types"]["gpu_learner"]["max_worker"] = 4
    assert any("max_worker" in e for e in launcher_errors(config))
    config = load(CLUSTERS / "aws.yaml")
    config["available_node_types"]["head"]["resources"]["CPU"] = 0.5  # must be an integer
    assert launcher_errors(config)


TOP_KEY = re.compile(r"^(\w[\w.-]*):")


@pytest.mark.parametrize(
    "path", [*LAUNCHER_FILES, NODE_TYPES, *KUBERAY_FILES], ids=lambda p: p.name
)
def test_top_level_and_node_type_keys_are_commented(path):
    lines = path.read_text().splitlines()
    node_type = re.compile(r"^ {2}(\w[\w.-]*):\s*$")
    in_types = False
    uncommented = []
    for i, line in enumerate(lines):
        if TOP_KEY.match(line):
            in_types = line.startswith("available_node_types:")
        is_key = TOP_KEY.match(line) or (in_types and node_type.match(line))
        if not is_key or line.startswith(("apiVersion:", "kind:")):
            continue
        previous = next((p for p in reversed(lines[:i]) if p.strip()), "")
        if not previous.lstrip().startswith("#"):
            uncommented.append(line)
    assert uncommented == []


SECRET_PATTERNS = {
    "AWS access key id": re.compile(r"AKIA[0-9A-Z]{16}"),
    "private key": re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    "long hex token": re.compile(r"\b[0-9a-f]{32,}\b"),
    "inline token": re.compile(r"RAY_AUTH_TOKEN\s*[=:]\s*\S", re.IGNORECASE),
    "password value": re.compile(r"password\s*[=:]\s*\S", re.IGNORECASE),
}


def test_no_secrets_in_clusters():
    files = [p for p in CLUSTERS.rglob("*") if p.is_file()]
    assert files
    found = [
        f"{p.relative_to(REPO)}: {name}"
        for p in files
        for name, pattern in SECRET_PATTERNS.items()
        if pattern.search(p.read_text())
    ]
    assert found == []
