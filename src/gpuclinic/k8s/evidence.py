"""The device plugin's view of this node, as findings next to the doctor's.

Inputs are what an operator has at hand: the node object (``kubectl get node -o json``, or read
through the API) and the device-plugin config, either the plugin's own YAML (``version: v1``,
``sharing.timeSlicing`` / ``sharing.mps``, ``flags.migStrategy``) or the GPU Operator's ConfigMap
whose data keys are config names.  From them: whether GPUs are shared and how many times each is
offered, the MIG strategy, and whether ``nvidia.com/gpu`` capacity and allocatable match the GPUs
the doctor sees (a GPU the plugin marked Unhealthy leaves allocatable but stays in capacity).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuclinic.errors import EXIT_USAGE, InputError
from gpuclinic.knowledge import load_data
from gpuclinic.model import Finding


@dataclass
class Sharing:
    mode: str = "none"  # none | time-slicing | mps
    replicas: int = 1
    resource: str = "nvidia.com/gpu"
    mig_strategy: str | None = None
    config_name: str | None = None
    evidence: list[str] = field(default_factory=list)


def _load_yaml_or_json(path: str) -> Any:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})", exit_code=EXIT_USAGE) from None
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        import yaml
    except ImportError:
        raise InputError(
            f"{path}: not JSON, and YAML needs PyYAML (pip install 'gpuclinic[k8s]')", exit_code=EXIT_USAGE
        ) from None
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        raise InputError(f"{path}: not valid YAML ({str(e).splitlines()[0]})", exit_code=EXIT_USAGE) from None
    return docs[0] if len(docs) == 1 else docs


def parse_device_plugin_config(obj: Any, *, name: str | None = None) -> Sharing:
    """A device-plugin config, or a GPU Operator ConfigMap of them (``name`` picks the key)."""
    if isinstance(obj, list):
        obj = next(
            (d for d in obj if isinstance(d, dict) and d.get("kind") == "ConfigMap"), obj[0] if obj else {}
        )
    if not isinstance(obj, dict):
        raise InputError("device-plugin config: expected a mapping", exit_code=EXIT_USAGE)
    if obj.get("kind") == "ConfigMap":
        data = obj.get("data") or {}
        if not data:
            raise InputError("device-plugin ConfigMap has no data", exit_code=EXIT_USAGE)
        key = name if name in data else sorted(data)[0]
        if name and name not in data:
            raise InputError(
                f"device-plugin ConfigMap has no key {name!r} (keys: {', '.join(sorted(data))})",
                exit_code=EXIT_USAGE,
            )
        import yaml

        sh = parse_device_plugin_config(yaml.safe_load(data[key]) or {})
        sh.config_name = key
        sh.evidence.insert(0, f"ConfigMap {obj.get('metadata', {}).get('name', '?')} key {key!r}")
        return sh
    sh = Sharing()
    flags = obj.get("flags") or {}
    if flags.get("migStrategy"):
        sh.mig_strategy = str(flags["migStrategy"])
        sh.evidence.append(f"flags.migStrategy: {sh.mig_strategy}")
    sharing = obj.get("sharing") or {}
    for key, mode in (("timeSlicing", "time-slicing"), ("mps", "mps")):
        block = sharing.get(key)
        if not block:
            continue
        for r in block.get("resources") or []:
            if r.get("name") in ("nvidia.com/gpu", "gpu") or str(r.get("name", "")).startswith("nvidia.com/"):
                sh.mode = mode
                sh.replicas = int(r.get("replicas") or 1)
                sh.resource = str(r.get("name"))
                if sh.resource == "gpu":
                    sh.resource = "nvidia.com/gpu"
                if block.get("renameByDefault"):
                    sh.resource += ".shared"
                sh.evidence.append(
                    f"sharing.{key}: {r.get('name')} x{sh.replicas}"
                    + (" (renameByDefault)" if block.get("renameByDefault") else "")
                )
                break
    return sh


def _qty(v: Any) -> int | None:
    try:
        return int(str(v))
    except (TypeError, ValueError):
        return None


def _finding(code: str, **kw: Any) -> Finding:
    """Severity, family and source from codes.json, the message from cluster.json, the remedy from the
    runbook."""
    from gpuclinic.knowledge import codes as K
    from gpuclinic.knowledge.runbooks import finding_remedy

    return K.finding(
        code,
        title=load_data("cluster.json")["findings"][code]["title"].format(**kw),
        remedy=finding_remedy(code),
        evidence=list(kw.get("evidence") or []),
        data={k: v for k, v in kw.items() if k != "evidence"},
        source=K.require(code).source,
    )


def node_findings(
    node: dict[str, Any] | None, sharing: Sharing | None, physical: int | None
) -> list[Finding]:
    """Findings from the node object and the device-plugin config, against ``physical`` GPUs."""
    out: list[Finding] = []
    sh = sharing or Sharing()
    labels = ((node or {}).get("metadata") or {}).get("labels") or {}
    strategy = sh.mig_strategy or labels.get("nvidia.com/mig.strategy")
    label_mode = labels.get("nvidia.com/gpu.sharing-strategy")
    if sharing is None and label_mode in ("time-slicing", "mps"):
        sh.mode = label_mode
        sh.replicas = _qty(labels.get("nvidia.com/gpu.replicas")) or 1
        sh.evidence.append(f"labels nvidia.com/gpu.sharing-strategy={label_mode}, gpu.replicas={sh.replicas}")
    if sh.mode != "none" and sh.replicas > 1:
        out.append(
            _finding(
                "k8s.gpu_time_sliced",
                mode=sh.mode,
                replicas=sh.replicas,
                resource=sh.resource,
                evidence=sh.evidence,
            )
        )
    if strategy and strategy != "none":
        what = (
            "MIG devices are offered as nvidia.com/gpu; every GPU must use the same profile"
            if strategy == "single"
            else "one nvidia.com/mig-<profile> resource per profile"
        )
        out.append(
            _finding("k8s.mig_strategy", strategy=strategy, what=what, evidence=[f"migStrategy {strategy}"])
        )
    if node is None:
        return out
    status = node.get("status") or {}
    res = sh.resource
    capacity, allocatable = status.get("capacity") or {}, status.get("allocatable") or {}
    cap = _qty(capacity.get(res))
    name = node.get("metadata", {}).get("name", "?")
    ev = [f"node {name}: capacity {res}={cap}, allocatable={_qty(allocatable.get(res))}"]
    # the GPUs, then each MIG profile (strategy mixed): the plugin drops a device it marked Unhealthy from
    # allocatable the same way
    for r in dict.fromkeys((res, *sorted(k for k in capacity if str(k).startswith(MIG_PREFIX)))):
        fenced = _fenced(name, r, capacity.get(r), allocatable.get(r))
        if fenced is not None:
            out.append(fenced)
    if cap is not None and physical is not None and strategy in (None, "none"):
        per = sh.replicas if sh.mode != "none" else 1
        if cap != physical * per:
            out.append(
                _finding(
                    "k8s.gpu_count_mismatch",
                    capacity=cap,
                    resource=res,
                    per_gpu=per,
                    physical=physical,
                    evidence=[*ev, f"doctor sees {physical} GPUs", *sh.evidence],
                )
            )
    return out


def _fenced(name: str, res: str, capacity: Any, allocatable: Any) -> Finding | None:
    """``k8s.gpu_fenced`` when ``res`` has fewer allocatable than capacity (the one rule)."""
    cap, alloc = _qty(capacity), _qty(allocatable)
    if cap is None or alloc is None or alloc >= cap:
        return None
    ev = [f"node {name}: capacity {res}={cap}, allocatable={alloc}"]
    return _finding(
        "k8s.gpu_fenced", missing=cap - alloc, capacity=cap, allocatable=alloc, resource=res, evidence=ev
    )


MIG_PREFIX = "nvidia.com/mig-"


def load_node(path: str) -> dict[str, Any]:
    obj = _load_yaml_or_json(path)
    if isinstance(obj, dict) and obj.get("kind") == "List":
        items = obj.get("items") or []
        obj = items[0] if items else {}
    if not isinstance(obj, dict) or obj.get("kind") not in ("Node", None) or "status" not in obj:
        raise InputError(
            f"{path}: not a Node object (use `kubectl get node NAME -o json`)", exit_code=EXIT_USAGE
        )
    return obj


def load_device_plugin_config(path: str, name: str | None = None) -> Sharing:
    return parse_device_plugin_config(_load_yaml_or_json(path), name=name)
