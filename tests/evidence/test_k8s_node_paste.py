"""A pasted Kubernetes node (``kubectl describe node``, ``get node -o yaml|json``) whose ``nvidia.com/gpu``
allocatable is below its capacity gives ``k8s.gpu_fenced``, the code ``gpuclinic k8s evidence`` gives for the
same node object read from the API; equal figures, pod specs and the "Allocated resources" table give
nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bothpaths import both_paths
from gpuclinic.explain import explain_text
from gpuclinic.k8s.evidence import node_findings
from gpuclinic.sources import k8s_node_text


def _describe(name: str, cap: int, alloc: int) -> str:
    return (
        f"Name:               {name}\n"
        "Roles:              <none>\n"
        "Labels:             nvidia.com/gpu.count=8\n"
        "                    nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3\n"
        "Taints:             <none>\n"
        "Capacity:\n"
        "  cpu:                224\n"
        "  memory:             2113336412Ki\n"
        f"  nvidia.com/gpu:     {cap}\n"
        "  pods:               110\n"
        "Allocatable:\n"
        "  cpu:                224\n"
        "  memory:             2113234012Ki\n"
        f"  nvidia.com/gpu:     {alloc}\n"
        "  pods:               110\n"
        "Allocated resources:\n"
        "  Resource           Requests      Limits\n"
        "  --------           --------      ------\n"
        "  nvidia.com/gpu     4             4\n"
    )


NODE_OBJ = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "gpu-node-7", "labels": {"nvidia.com/gpu.count": "8"}},
    "status": {
        "capacity": {"cpu": "96", "nvidia.com/gpu": "8", "pods": "110"},
        "allocatable": {"cpu": "95500m", "nvidia.com/gpu": "7", "pods": "110"},
    },
}

POD_SPEC = (
    "apiVersion: v1\n"
    "kind: Pod\n"
    "spec:\n"
    "  containers:\n"
    "  - name: cuda\n"
    "    resources:\n"
    "      limits:\n"
    '        nvidia.com/gpu: "2"\n'
    "      requests:\n"
    '        nvidia.com/gpu: "1"\n'
)


@pytest.mark.parametrize(
    "text",
    [
        _describe("gpu-node-7", 8, 6),
        json.dumps(NODE_OBJ, indent=4),  # kubectl get node -o json
        json.dumps(NODE_OBJ),  # one line
    ],
    ids=["describe", "json-pretty", "json-line"],
)
def test_allocatable_below_capacity_is_fenced_by_both_paths(tmp_path: Path, text: str) -> None:
    for codes in both_paths(tmp_path, text):
        assert codes.get("k8s.gpu_fenced") == "critical", codes


def test_same_code_and_title_as_k8s_evidence_on_the_node_object(tmp_path: Path) -> None:
    (live,) = node_findings(NODE_OBJ, None, None)
    report = explain_text(json.dumps(NODE_OBJ, indent=2), "node.json")
    (pasted,) = [f for f in report.findings if f.code.startswith("k8s.")]
    assert (pasted.code, pasted.severity, pasted.title) == (live.code, live.severity, live.title)
    assert "gpu-node-7" in pasted.evidence[0]
    assert "capacity nvidia.com/gpu=8, allocatable=7" in pasted.evidence[0]


def test_healthy_node_pod_spec_and_allocated_table_give_nothing(tmp_path: Path) -> None:
    for codes in both_paths(tmp_path, _describe("ok-node", 8, 8)):
        assert not {c for c, s in codes.items() if s in ("warning", "critical")}, codes
    assert k8s_node_text.read(POD_SPEC.splitlines(), None) == ([], set())  # limits/requests: not a node
    assert not [f for f in explain_text(POD_SPEC, "pod.yaml").findings if f.code.startswith("k8s.")]


def test_each_node_of_a_multi_node_describe_is_judged_alone() -> None:
    text = _describe("node-a", 8, 8) + "\n\n" + _describe("node-b", 8, 7) + _describe("node-c", 4, 4)
    nodes, used = k8s_node_text.read(text.splitlines(), None)
    gpu = "nvidia.com/gpu"
    figures = [
        (n["metadata"]["name"], n["status"]["capacity"][gpu], n["status"]["allocatable"][gpu])
        for n, _ in nodes
    ]
    assert figures == [("node-a", "8", "8"), ("node-b", "8", "7"), ("node-c", "4", "4")]
    assert len(used) == 6
    report = explain_text(text, "nodes.txt")
    fenced = [f for f in report.findings if f.code == "k8s.gpu_fenced"]
    assert len(fenced) == 1 and "node-b" in fenced[0].evidence[0]


def test_only_the_lines_given_are_looked_at() -> None:
    """On a big input the reader sees only the literal scan's hit lines (``where``)."""
    lines = _describe("n", 8, 2).splitlines()
    hits = [k for k, line in enumerate(lines) if k8s_node_text.KEY in line]
    assert k8s_node_text.read(lines, hits)[0] == k8s_node_text.read(lines, None)[0]
    assert k8s_node_text.read(lines, [])[0] == []


def test_feature_discovery_labels_give_the_k8s_evidence_notes() -> None:
    """``nvidia.com/mig.strategy`` and the sharing labels of a pasted node: the info findings ``k8s evidence``
    draws from the same labels, and no warning (equal figures)."""
    text = (
        "Name:               dgx-a100-01\n"
        "Labels:             beta.kubernetes.io/arch=amd64\n"
        "                    nvidia.com/mig.strategy=mixed\n"
        "                    nvidia.com/gpu.sharing-strategy=time-slicing\n"
        "                    nvidia.com/gpu.replicas=4\n"
        "Capacity:\n  nvidia.com/gpu:     32\nAllocatable:\n  nvidia.com/gpu:     32\n"
    )
    ((node, _),) = k8s_node_text.read(text.splitlines(), None)[0]
    assert node["metadata"]["labels"]["nvidia.com/mig.strategy"] == "mixed"
    live = {(f.code, f.title) for f in node_findings(node, None, None)}
    codes = {(f.code, f.title) for f in explain_text(text, "n.txt").findings if f.code.startswith("k8s.")}
    assert codes == live and {c for c, _ in codes} == {"k8s.mig_strategy", "k8s.gpu_time_sliced"}
    assert explain_text(text, "n.txt").exit_code == 0


def test_jq_of_capacity_and_allocatable_is_read() -> None:
    """``kubectl get node N -o json | jq .status.capacity`` prints the map without its key: the command line
    above the ``{`` names it."""
    text = (
        "$ kubectl get node sm02 -o json | jq .status.capacity\n"
        '{\n  "cpu": "96",\n  "nvidia.com/gpu": "8",\n  "pods": "110"\n}\n'
        "$ kubectl get node sm02 -o jsonpath='{.status.allocatable}' | jq\n"
        '{\n  "cpu": "96",\n  "nvidia.com/gpu": "6",\n  "pods": "110"\n}\n'
    )
    report = explain_text(text, "jq.txt")
    assert [f.title for f in report.findings if f.code == "k8s.gpu_fenced"] == [
        "The device plugin withholds 2 of 8 nvidia.com/gpu on this node (allocatable 6)"
    ]
    other = ["$ echo '{}' | jq .", "{", '  "nvidia.com/gpu": "8"', "}"]
    assert k8s_node_text.read(other, None)[0] == []


def test_elided_resource_lines_keep_the_map() -> None:
    """People cut the other resources to `....` (k8s-device-plugin#1228): the map goes on past them."""
    text = (
        '  allocatable:\n    .......\n    nvidia.com/gpu: "6"\n    ....\n'
        '  capacity:\n    …\n    nvidia.com/gpu: "8"\n'
    )
    ((node, _),) = k8s_node_text.read(text.splitlines(), None)[0]
    assert node["status"] == {"allocatable": {"nvidia.com/gpu": "6"}, "capacity": {"nvidia.com/gpu": "8"}}


def test_mig_profiles_of_a_mixed_node_are_read_and_judged() -> None:
    text = (
        "Name:               dgx-mig\n"
        "Labels:             nvidia.com/mig.strategy=mixed\n"
        "Capacity:\n  cpu:                      256\n"
        "  nvidia.com/mig-1g.10gb:   14\n  nvidia.com/mig-3g.40gb:   4\n"
        "Allocatable:\n  cpu:                      255\n"
        "  nvidia.com/mig-1g.10gb:   12\n  nvidia.com/mig-3g.40gb:   4\n"
    )
    ((node, _),) = k8s_node_text.read(text.splitlines(), None)[0]
    assert node["status"]["allocatable"] == {"nvidia.com/mig-1g.10gb": "12", "nvidia.com/mig-3g.40gb": "4"}
    fenced = [f.title for f in explain_text(text, "mig.txt").findings if f.code == "k8s.gpu_fenced"]
    assert fenced == [
        "The device plugin withholds 2 of 14 nvidia.com/mig-1g.10gb on this node (allocatable 12)"
    ]
