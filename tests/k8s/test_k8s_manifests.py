"""Every shipped Kubernetes manifest validates (strict) against the OpenAPI schema of a pinned Kubernetes
release, and the NPD plugin config follows node-problem-detector's own validation rules."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any, cast

import kubernetes_validate
import pytest
import yaml

K8S_VERSION = "1.33.0"  # pinned: schemas shipped by kubernetes-validate (instrumenta/kubernetes-json-schema)
DEPLOY = [Path(str(resources.files("gpuclinic.k8s").joinpath("deploy"))),
          Path(str(resources.files("gpuclinic.watch").joinpath("deploy")))]
MANIFESTS = sorted(p for d in DEPLOY for p in d.glob("*.yaml") if not p.name.startswith(("gpuclinic-rules",)))


def _docs(p: Path) -> list[dict]:  # type: ignore[type-arg]
    return [d for d in yaml.safe_load_all(p.read_text()) if d]


def test_there_are_manifests() -> None:
    names = {p.name for p in MANIFESTS}
    assert {"daemonset.yaml", "node-condition.yaml", "npd-configmap.yaml"} <= names, names


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifest_is_valid_kubernetes(path: Path) -> None:
    docs = _docs(path)
    assert docs
    for d in docs:
        kubernetes_validate.validate(d, K8S_VERSION, strict=True)


def test_the_validator_rejects_a_broken_manifest() -> None:
    d = _docs(next(p for p in MANIFESTS if p.name == "node-condition.yaml"))[-1]
    d["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = 3  # wrong type
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(d, K8S_VERSION, strict=True)
    d = _docs(next(p for p in MANIFESTS if p.name == "node-condition.yaml"))[-1]
    d["spec"]["template"]["spec"]["containers"][0]["argz"] = []  # unknown field: strict catches it
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(d, K8S_VERSION, strict=True)


def test_rbac_is_minimal() -> None:
    docs = _docs(next(p for p in MANIFESTS if p.name == "node-condition.yaml"))
    rules = [(r["resources"], r["verbs"]) for d in docs if d["kind"] == "ClusterRole" for r in d["rules"]]
    assert sorted(rules) == [(["nodes"], ["patch"]), (["nodes/status"], ["get", "patch"])]


def _npd() -> dict[str, Any]:
    return cast(dict[str, Any], json.loads((DEPLOY[0] / "npd-gpuclinic.json").read_text()))


def test_npd_config_follows_npd_validation() -> None:
    """The checks of node-problem-detector's pkg/custompluginmonitor/types/config.go Validate()."""
    from gpuclinic.watch.config import parse_duration

    c = _npd()
    assert c["plugin"] == "custom"
    pc = c["pluginConfig"]
    glob = parse_duration(pc["timeout"], what="timeout")
    assert parse_duration(pc["invoke_interval"], what="i") > glob  # a run ends before the next starts
    cond_types = {x["type"] for x in c["conditions"]}
    for r in c["rules"]:
        assert r["type"] in ("temporary", "permanent")
        if r["type"] == "permanent":
            assert r["condition"] in cond_types
        # a rule timeout above the global one is invalid
        assert parse_duration(r["timeout"], what="t") <= glob
        assert r["args"] == ["k8s", "npd"]
    from gpuclinic.knowledge import load_data

    npd = load_data("cluster.json")["npd"]
    assert pc["max_output_length"] == npd["max_output_length"] and npd["condition_type"] in cond_types


def test_npd_configmap_carries_the_same_config() -> None:
    cm = _docs(next(p for p in MANIFESTS if p.name == "npd-configmap.yaml"))[0]
    assert json.loads(cm["data"]["npd-gpuclinic.json"]) == _npd()
