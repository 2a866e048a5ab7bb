"""GPUProblem condition and taint patches, and the official kubernetes client sending them.

No kube-apiserver can run on the test machines, so the client talks to a local HTTP endpoint that
answers like the API server for one node and records what it receives (method, path, content type,
body); the patches themselves are checked against the Kubernetes Node schema.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from gpuclinic.errors import GpuclinicError
from gpuclinic.k8s.node import apply, condition_patch, taints_after
from gpuclinic.k8s.npd import PluginResult

BAD = PluginResult(1, "drain: gpu.fallen_off_bus GPU 4", code="gpu.fallen_off_bus")
OK = PluginResult(0, "healthy: 8 GPUs")
UNKNOWN = PluginResult(2, "gpuclinic could not judge: no GPUs seen")
ADMIN = {"key": "maintenance", "value": "disk", "effect": "NoExecute"}


def test_condition_patch_and_transition_time() -> None:
    p = condition_patch(BAD, [], now="2026-01-01T00:00:00Z")
    c = p["status"]["conditions"][0]
    assert (c["type"], c["status"], c["reason"], c["message"]) == ("GPUProblem", "True", "GPUUnhealthy",
                                                                  BAD.message)
    old = [{"type": "GPUProblem", "status": "True", "lastTransitionTime": "2025-12-31T00:00:00Z"}]
    again = condition_patch(BAD, old, now="2026-01-01T00:05:00Z")["status"]["conditions"][0]
    assert again["lastTransitionTime"] == "2025-12-31T00:00:00Z" and again["lastHeartbeatTime"].endswith(
        "05:00Z"
    )
    cleared = condition_patch(OK, old, now="2026-01-01T00:10:00Z")["status"]["conditions"][0]
    assert cleared["status"] == "False" and cleared["lastTransitionTime"] == "2026-01-01T00:10:00Z"
    assert condition_patch(UNKNOWN)["status"]["conditions"][0]["status"] == "Unknown"
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, **p}
    kubernetes_validate.validate(node, "1.33.0", strict=True)


def test_taints_only_ever_touch_our_key() -> None:
    mine = {"key": "gpuclinic.io/gpu-problem", "value": "gpu.fallen_off_bus", "effect": "NoSchedule"}
    assert taints_after(BAD, [ADMIN]) == [ADMIN, mine]
    assert taints_after(BAD, [ADMIN, mine]) is None  # already there: no write
    assert taints_after(OK, [ADMIN, mine]) == [ADMIN]
    assert taints_after(OK, [ADMIN]) is None
    assert taints_after(UNKNOWN, [ADMIN, mine]) is None  # could not check: leave as is
    odd = taints_after(PluginResult(1, "x", code="xid/79 weird"), [])
    assert odd is not None and odd[0]["value"] == "xid_79_weird"


class ApiServer:
    """One node, answering GET .../status and PATCH like the API server; records requests."""

    def __init__(self, taints: list[dict[str, Any]]) -> None:
        self.requests: list[tuple[str, str, str, Any]] = []
        self.node: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "gpu-node-1", "resourceVersion": "4711"},
            "spec": {"taints": taints},
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    }
                ],
                "capacity": {"nvidia.com/gpu": "32"},
                "allocatable": {"nvidia.com/gpu": "28"},
            },
        }
        self.config_map: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "time-slicing-config-all", "namespace": "gpu-operator"},
            "data": {
                "any": "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                "    - name: nvidia.com/gpu\n      replicas: 4\n"
            },
        }
        srv = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                return

            def _reply(self, code: int, obj: Any) -> None:
                body = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                srv.requests.append(("GET", self.path, "", None))
                if self.path.startswith("/api/v1/nodes/gpu-node-1"):
                    self._reply(200, srv.node)
                elif self.path.startswith(
                    "/api/v1/namespaces/gpu-operator/configmaps/time-slicing-config-all"
                ):
                    self._reply(200, srv.config_map)
                else:
                    self._reply(404, {"kind": "Status", "code": 404, "reason": "NotFound"})

            def do_PATCH(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n))
                srv.requests.append(("PATCH", self.path, self.headers.get("Content-Type", ""), body))
                self._reply(200, srv.node)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def kubeconfig(self, path: Path) -> str:
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "t",
                    "clusters": [{"name": "t", "cluster": {"server": self.url}}],
                    "users": [{"name": "t", "user": {"token": "test-token-not-secret"}}],
                    "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}],
                }
            )
        )
        return str(path)


@pytest.fixture
def api() -> Iterator[ApiServer]:
    s = ApiServer([ADMIN])
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


def test_client_patches_status_and_taints(api: ApiServer, tmp_path: Path) -> None:
    done = apply("gpu-node-1", BAD, taint=True, kubeconfig=api.kubeconfig(tmp_path / "kc"))
    patches = [r for r in api.requests if r[0] == "PATCH"]
    assert [r[1].split("?")[0] for r in patches] == [
        "/api/v1/nodes/gpu-node-1/status",
        "/api/v1/nodes/gpu-node-1",
    ]
    assert all(r[2] == "application/strategic-merge-patch+json" for r in patches), patches
    assert patches[0][3] == done.condition
    assert patches[1][3]["metadata"] == {"resourceVersion": "4711"}
    assert patches[1][3]["spec"]["taints"] == [
        ADMIN,
        {"key": "gpuclinic.io/gpu-problem", "value": "gpu.fallen_off_bus", "effect": "NoSchedule"},
    ]
    assert api.requests[0][:2] == ("GET", "/api/v1/nodes/gpu-node-1/status")


def test_client_without_taint_flag_never_touches_the_spec(api: ApiServer, tmp_path: Path) -> None:
    apply("gpu-node-1", BAD, taint=False, kubeconfig=api.kubeconfig(tmp_path / "kc"))
    assert [r[1].split("?")[0] for r in api.requests if r[0] == "PATCH"] == [
        "/api/v1/nodes/gpu-node-1/status"
    ]


def test_unknown_node_is_one_line_error(api: ApiServer, tmp_path: Path) -> None:
    with pytest.raises(GpuclinicError, match="Kubernetes API: 404"):
        apply("nope", BAD, taint=True, kubeconfig=api.kubeconfig(tmp_path / "kc"))


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuclinic", "k8s", "condition", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_cli_dry_run_client_contacts_nothing() -> None:
    p = _cli("--scenario", "fallen-off-bus", "--dry-run", "client", "--taint", "--node", "n1")
    assert p.returncode == 2, p.stderr
    out = json.loads(p.stdout)
    assert out["condition_patch"]["status"]["conditions"][0]["message"] == "drain: gpu.fallen_off_bus GPU 4"
    assert out["taints_if_node_has_none"][0]["value"] == "gpu.fallen_off_bus"


def test_cli_healthy_node_untaints_only_ours(api: ApiServer, tmp_path: Path) -> None:
    mine = {"key": "gpuclinic.io/gpu-problem", "value": "gpu.fallen_off_bus", "effect": "NoSchedule"}
    api.node["spec"]["taints"] = [ADMIN, mine]
    p = _cli(
        "--scenario",
        "healthy-8xh100-load",
        "--taint",
        "--node",
        "gpu-node-1",
        "--kubeconfig",
        api.kubeconfig(tmp_path / "kc"),
    )
    assert p.returncode == 0, p.stderr
    patches = [r for r in api.requests if r[0] == "PATCH"]
    assert patches[0][3]["status"]["conditions"][0]["status"] == "False"
    assert patches[1][3]["spec"]["taints"] == [ADMIN]
    assert "GPUProblem=False" in p.stderr and "test-token-not-secret" not in p.stderr + p.stdout


def test_evidence_reads_node_and_configmap_from_the_api(api: ApiServer, tmp_path: Path) -> None:
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuclinic",
            "k8s",
            "evidence",
            "--scenario",
            "healthy-8xh100-load",
            "--node",
            "gpu-node-1",
            "--config-map",
            "gpu-operator/time-slicing-config-all",
            "--kubeconfig",
            api.kubeconfig(tmp_path / "kc"),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    d = json.loads(p.stdout)
    got = {f["code"]: f for f in d["findings"] if f["code"].startswith("k8s.")}
    # 8 GPUs x 4 replicas = 32 offered (consistent), 4 withheld by the plugin
    assert set(got) == {"k8s.gpu_fenced", "k8s.gpu_time_sliced"}, got
    assert "withholds 4 of 32" in got["k8s.gpu_fenced"]["title"] and p.returncode == 2
    assert [r[1].split("?")[0] for r in api.requests] == [
        "/api/v1/nodes/gpu-node-1",
        "/api/v1/namespaces/gpu-operator/configmaps/time-slicing-config-all",
    ]
