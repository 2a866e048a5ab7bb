"""Device-plugin / GPU Operator configuration and the node object as evidence."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuclinic.k8s.evidence import node_findings, parse_device_plugin_config

# the documented shapes (GPU Operator "Time-Slicing GPUs in Kubernetes", k8s-device-plugin README)
OPERATOR_CM = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: time-slicing-config-all
data:
  any: |-
    version: v1
    flags:
      migStrategy: none
    sharing:
      timeSlicing:
        resources:
        - name: nvidia.com/gpu
          replicas: 4
"""
MPS = {"version": "v1", "sharing": {"mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}}


def node(cap: int, alloc: int, labels: dict[str, str] | None = None) -> dict:  # type: ignore[type-arg]
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-node-1", "labels": labels or {}},
            "status": {"capacity": {"nvidia.com/gpu": str(cap), "cpu": "64"},
                       "allocatable": {"nvidia.com/gpu": str(alloc), "cpu": "63"}}}


def codes(fs: list) -> list[str]:  # type: ignore[type-arg]
    return sorted(f.code for f in fs)


def test_time_slicing_from_the_operator_configmap() -> None:
    import yaml

    sh = parse_device_plugin_config(yaml.safe_load(OPERATOR_CM))
    assert (sh.mode, sh.replicas, sh.mig_strategy, sh.config_name) == ("time-slicing", 4, "none", "any")
    # 8 GPUs x 4 replicas = 32 offered: consistent, only the sharing note
    assert codes(node_findings(node(32, 32), sh, 8)) == ["k8s.gpu_time_sliced"]
    # one GPU fell off: the plugin still offers 32 while 7 are seen
    fs = node_findings(node(32, 32), sh, 7)
    assert codes(fs) == ["k8s.gpu_count_mismatch", "k8s.gpu_time_sliced"]
    mm = next(f for f in fs if f.code == "k8s.gpu_count_mismatch")
    assert mm.title == "Kubernetes offers 32 nvidia.com/gpu (4 per GPU) but this node has 7 GPUs"


def test_fenced_gpu_and_mps() -> None:
    sh = parse_device_plugin_config(MPS)
    assert (sh.mode, sh.replicas) == ("mps", 2)
    fs = node_findings(node(16, 14), sh, 8)
    f = next(x for x in fs if x.code == "k8s.gpu_fenced")
    assert f.severity.label == "critical" and "withholds 2 of 16" in f.title


def test_labels_and_mig() -> None:
    fs = node_findings(
        node(8, 8, {"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "2"}),
        None,
        4,
    )
    assert codes(fs) == ["k8s.gpu_time_sliced"]
    fs = node_findings(node(28, 28, {"nvidia.com/mig.strategy": "single"}), None, 4)
    assert codes(fs) == ["k8s.mig_strategy"]  # MIG devices are counted, not GPUs: no count check
    assert codes(node_findings(node(8, 8), None, 8)) == []


def test_mig_profile_resources_are_fenced_by_the_same_rule() -> None:
    """Strategy mixed: a MIG device the plugin marked Unhealthy leaves ``nvidia.com/mig-<profile>``
    allocatable; each profile is judged like the GPUs, equal profiles give nothing."""
    n = node(0, 0, {"nvidia.com/mig.strategy": "mixed"})
    n["status"]["capacity"].update({"nvidia.com/mig-1g.10gb": "14", "nvidia.com/mig-3g.40gb": "4"})
    n["status"]["allocatable"].update({"nvidia.com/mig-1g.10gb": "13", "nvidia.com/mig-3g.40gb": "4"})
    fs = node_findings(n, None, 2)
    assert codes(fs) == ["k8s.gpu_fenced", "k8s.mig_strategy"]
    (f,) = [x for x in fs if x.code == "k8s.gpu_fenced"]
    assert "withholds 1 of 14 nvidia.com/mig-1g.10gb" in f.title


def test_cli_evidence_json(tmp_path: Path) -> None:
    (tmp_path / "node.json").write_text(json.dumps(node(8, 7)))
    (tmp_path / "cm.yaml").write_text(OPERATOR_CM)
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuclinic",
            "k8s",
            "evidence",
            "--scenario",
            "healthy-8xh100-load",
            "--node-json",
            str(tmp_path / "node.json"),
            "--device-plugin-config",
            str(tmp_path / "cm.yaml"),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    d = json.loads(p.stdout)
    got = {f["code"] for f in d["findings"]}
    # 8 offered with 4 replicas per GPU but 8 GPUs seen (32 expected), and one withheld
    assert {"k8s.gpu_fenced", "k8s.gpu_count_mismatch", "k8s.gpu_time_sliced"} <= got, got
    assert p.returncode == 2 and d["verdict"] == "drain"


@pytest.mark.parametrize("args", [["--node-json", "/nonexistent.json"], []])
def test_cli_evidence_bad_input(args: list[str]) -> None:
    p = subprocess.run(
        [sys.executable, "-m", "gpuclinic", "k8s", "evidence", "--scenario", "healthy-8xh100-load", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert p.returncode == 64 and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr
