"""The GPUProblem node condition and the gpuclinic taint, as patches, applied with the official client.

Patches are built as plain dicts (so ``--dry-run`` prints exactly what would be sent and tests can
check them); :func:`apply` sends them with the ``kubernetes`` package (extra ``[k8s]``, imported only
here).  The condition goes to the ``nodes/status`` subresource (a strategic merge on
``status.conditions``, keyed by type); the taint edits ``spec.taints`` and is only ever added or
removed under gpuclinic's own key, so other taints are kept as they are.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any

from gpuclinic.errors import GpuclinicError
from gpuclinic.k8s.npd import PluginResult
from gpuclinic.knowledge import load_data


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition_patch(res: PluginResult, current: list[dict[str, Any]] | None = None, now: str | None = None
                    ) -> dict[str, Any]:
    """Strategic-merge patch for ``nodes/<n>/status`` setting the GPUProblem condition.

    lastTransitionTime moves only when the status changes, as the node lifecycle controller does.
    """
    c = load_data("cluster.json")["node_condition"]
    now = now or _now()
    status = {0: "False", 1: "True"}.get(res.status, "Unknown")
    reason = {0: c["reason_ok"], 1: c["reason_problem"]}.get(res.status, c["reason_unknown"])
    old = next((x for x in (current or []) if x.get("type") == c["type"]), None)
    since = old.get("lastTransitionTime") if old and old.get("status") == status else now
    return {"status": {"conditions": [{
        "type": c["type"], "status": status, "reason": reason, "message": res.message,
        "lastHeartbeatTime": now, "lastTransitionTime": since or now,
    }]}}


def taints_after(res: PluginResult, taints: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The node's taint list with gpuclinic's taint set (NonOK) or removed (OK); None if unchanged.

    Unknown (the check could not run) leaves the taints alone.
    """
    t = load_data("cluster.json")["taint"]
    mine = [x for x in taints if x.get("key") == t["key"]]
    others = [x for x in taints if x.get("key") != t["key"]]
    if res.status == 1:
        want = {"key": t["key"], "value": _label_value(res.code or "problem"), "effect": t["effect"]}
        if len(mine) == 1 and all(mine[0].get(k) == v for k, v in want.items()):
            return None
        return [*others, want]
    if res.status == 0 and mine:
        return others
    return None


def _label_value(code: str) -> str:
    """A taint value must be a label value: 63 chars of [A-Za-z0-9._-], alphanumeric at both ends."""
    v = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in code)[:63].strip("._-")
    return v or "problem"


@dataclass
class Applied:
    condition: dict[str, Any]
    taints: list[dict[str, Any]] | None  # the new list, None when not changed


def _api(kubeconfig: str | None) -> Any:
    """A CoreV1Api from --kubeconfig, else the in-cluster service account, else ~/.kube/config."""
    try:
        from kubernetes import client, config  # optional extra: pip install 'gpuclinic[k8s]'
    except ImportError:
        raise GpuclinicError("the kubernetes client is not installed: pip install 'gpuclinic[k8s]'") from None
    try:
        if kubeconfig:
            config.load_kube_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
        else:
            try:
                config.load_incluster_config()  # type: ignore[no-untyped-call]
            except config.ConfigException:
                config.load_kube_config()  # type: ignore[no-untyped-call]
    except config.ConfigException as e:
        raise GpuclinicError(f"no Kubernetes credentials: {e}") from None
    return client.CoreV1Api()


def read_objects(node: str | None, config_map: str | None, kubeconfig: str | None = None
                 ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The node and a ``NAMESPACE/NAME`` ConfigMap from the API, as the JSON kubectl would print."""
    from kubernetes.client.exceptions import ApiException

    api = _api(kubeconfig)
    ser = api.api_client.sanitize_for_serialization
    try:
        n = ser(api.read_node(node)) if node else None
        cm = None
        if config_map:
            ns, _, name = config_map.partition("/")
            if not name:
                raise GpuclinicError(f"--config-map {config_map!r}: expected NAMESPACE/NAME", exit_code=64)
            cm = ser(api.read_namespaced_config_map(name, ns))
    except ApiException as e:
        raise GpuclinicError(f"Kubernetes API: {e.status} {e.reason}") from None
    except OSError as e:
        raise GpuclinicError(f"cannot reach the Kubernetes API: {e}") from None
    if n is not None:
        n.setdefault("kind", "Node")
    if cm is not None:
        cm.setdefault("kind", "ConfigMap")
    return n, cm


def apply(node: str, res: PluginResult, *, taint: bool, kubeconfig: str | None = None,
          dry_run: bool = False) -> Applied:
    """Read the node, patch its GPUProblem condition and (with ``taint``) gpuclinic's taint."""
    api = _api(kubeconfig)
    from kubernetes.client.exceptions import ApiException

    try:
        obj: Any = api.read_node_status(node)
        cur = [c.to_dict() for c in (obj.status.conditions or [])]
        cur = [{"type": c.get("type"), "status": c.get("status"),
                "lastTransitionTime": _iso(c.get("last_transition_time"))} for c in cur]
        cond = condition_patch(res, cur)
        new_taints = None
        if taint:
            have = [{k: v for k, v in t.to_dict().items() if v is not None and k != "time_added"}
                    for t in (obj.spec.taints or [])]
            new_taints = taints_after(res, have)
        kw: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
        api.patch_node_status(node, cond, **kw)
        if new_taints is not None:
            # taints have no merge key: the whole list is replaced, guarded by resourceVersion so a
            # concurrent edit by someone else fails (409) instead of being overwritten
            api.patch_node(node, {"metadata": {"resourceVersion": obj.metadata.resource_version},
                                  "spec": {"taints": new_taints}}, **kw)
        return Applied(cond, new_taints)
    except ApiException as e:
        raise GpuclinicError(f"Kubernetes API: {e.status} {e.reason} for node {node}") from None
    except OSError as e:
        raise GpuclinicError(f"cannot reach the Kubernetes API: {e}") from None

def _iso(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, _dt.datetime):
        return v.astimezone(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return str(v)
