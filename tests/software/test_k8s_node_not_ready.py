"""``k8s.node_not_ready``: the forms a NotReady GPU node takes in what people paste (``kubectl get nodes``
rows, the Ready row of ``kubectl describe node``, the taints the node controller sets, e2e and event
logs), and what it must not take for one."""

from __future__ import annotations

import pytest

from gpuclinic.knowledge.signatures import match

SIG = "k8s.node_not_ready"


@pytest.mark.parametrize(
    "text",
    [
        "NAME     STATUS     ROLES    AGE   VERSION\ngpu-7    NotReady   <none>   17h   v1.29.3\n",
        "gpu-7    NotReady,SchedulingDisabled   <none>   3d   v1.29.3\n",
        "  Ready            Unknown   Sun, 31 May 2020 19:50:30 +0800   Sun, 31 May 2020 19:51:13 +0800"
        "   NodeStatusUnknown   Kubelet stopped posting node status.\n",
        "  Ready  False  Mon, 02 Dec 2019 17:47:39 +0000  Mon, 02 Dec 2019 17:47:39 +0000  KubeletNotReady"
        "  container runtime network not ready: NetworkReady=false\n",
        "Taints:             node.kubernetes.io/unreachable:NoExecute\n",
        "  Normal  NodeNotReady  23m  kubelet, gpu-7  Node gpu-7 status is now: NodeNotReady\n",
    ],
)
def test_forms_of_a_node_not_ready(text: str) -> None:
    assert SIG in {m.id for m in match(text)}


@pytest.mark.parametrize(
    "text",
    [
        "NAME     STATUS   ROLES    AGE   VERSION\ngpu-7    Ready    <none>   17h   v1.29.3\n",
        "  Ready  True  Mon, 02 Dec 2019 17:47:39 +0000  Mon, 02 Dec 2019 17:47:39 +0000  KubeletReady"
        "  kubelet is posting ready status\n",
        "  Normal  NodeReady  22m  kubelet, gpu-7  Node gpu-7 status is now: NodeReady\n",
        "Taints:             nvidia.com/gpu=true:NoSchedule\n",
    ],
)
def test_a_ready_node_is_not_taken_for_one(text: str) -> None:
    assert SIG not in {m.id for m in match(text)}
