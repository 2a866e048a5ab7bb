"""Kubernetes node status as people paste it: ``kubectl describe node`` (``Capacity:`` / ``Allocatable:``
blocks, the GPU Feature Discovery labels), ``kubectl get node -o yaml`` (``capacity:`` / ``allocatable:``
maps) and ``-o json`` (one object per line or pretty-printed).

The device plugin keeps a GPU it marked Unhealthy in ``capacity`` and drops it from ``allocatable``, so
the pair of ``nvidia.com/gpu`` figures (and of each ``nvidia.com/mig-<profile>`` of strategy mixed) is the
evidence.  The figures (and the ``nvidia.com/mig.strategy``, ``gpu.sharing-strategy`` and ``gpu.replicas``
labels) become the node object ``k8s evidence`` reads from the API, and
:func:`gpuclinic.k8s.evidence.node_findings` judges them (one definition of ``k8s.gpu_fenced``,
``k8s.mig_strategy``, ``k8s.gpu_time_sliced``); its findings become signals of this input.  The GPU count
check is not run: a paste does not say how many GPUs the node has.

Cheap to rule out: only lines holding the literal ``nvidia.com/gpu``, ``nvidia.com/mig-`` or
``nvidia.com/mig.strategy`` are looked at (on a big input, only the hit lines of the shared literal scan),
and a line is read only when it is a label or a resource line (``key: value``) under a
``capacity``/``allocatable`` header.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpuclinic import lazyre

KEY = "nvidia.com/gpu"
MIG_KEY = "nvidia.com/mig-"  # the MIG profile resources of strategy mixed (nvidia.com/mig-1g.10gb)
# a resource line of describe (`  nvidia.com/gpu:     8`), YAML (`nvidia.com/gpu: "8"`) or pretty JSON
_RES = lazyre.compile(r'^\s*"?(?P<r>nvidia\.com/(?:gpu|mig-[\w.-]+))"?\s*:\s*"?(?P<n>\d+)"?\s*,?\s*$')
# a map header: `Capacity:`, `  allocatable:`, `"capacity": {` (a fenced-code opener may precede it)
_HEAD = lazyre.compile(r'^\s*(?:```)?\s*"?(?P<k>[A-Za-z][\w./-]*)"?\s*:\s*\{?\s*$')
# one-line JSON: `"capacity":{"cpu":"96",...,"nvidia.com/gpu":"8",...}`
_INLINE = lazyre.compile(r'"(?P<k>capacity|allocatable)"\s*:\s*\{(?P<body>[^{}]*)\}')
_INLINE_RES = lazyre.compile(r'"(?P<r>nvidia\.com/(?:gpu|mig-[\w.-]+))"\s*:\s*"?(?P<n>\d+)')
# the GPU Feature Discovery labels the k8s evidence rules read (describe `key=value`, YAML/JSON `key: value`)
LABEL_KEY = "nvidia.com/mig.strategy"  # (the sharing labels hold KEY already)
_LABEL = lazyre.compile(
    r'^\s*(?:Labels:\s+)?"?(?P<k>nvidia\.com/(?:mig\.strategy|gpu\.sharing-strategy|gpu\.replicas))"?'
    r'\s*[=:]\s*"?(?P<v>[\w.-]+)"?,?\s*$'
)
_NAME = lazyre.compile(r'^(?:Name:\s+(?P<d>\S+)|\s*"?name"?\s*:\s*"?(?P<y>[\w.-]+)"?,?)\s*$')
LOOKBACK = 40  # resource lines in one map (describe lists ~10; a node with many extended resources more)
NAME_LOOKBACK = 120


def _header(lines: list[str], k: int) -> str | None:
    """``capacity`` or ``allocatable`` when the resource line ``k`` sits in such a map, else None."""
    for j in range(k - 1, max(-1, k - LOOKBACK), -1):
        line = lines[j]
        m = _HEAD.match(line)
        if m is not None:
            name = m.group("k").lower()
            return name if name in ("capacity", "allocatable") else None
        if line.strip() == "{" and j > 0:  # `kubectl get node N -o json | jq .status.capacity` and its `{`
            cmd = lines[j - 1]
            for name in ("allocatable", "capacity"):
                if f"status.{name}" in cmd and ("jq" in cmd or "jsonpath" in cmd):
                    return name
            return None
        if ":" not in line and line.strip(" .…"):  # not a resource line (nor a `....` elision): the map ended
            return None
    return None


def _name(lines: list[str], k: int) -> str | None:
    for j in range(k - 1, max(-1, k - NAME_LOOKBACK), -1):
        if "ame" in lines[j] and (m := _NAME.match(lines[j])):
            return m.group("d") or m.group("y")
    return None


def read(lines: list[str], where: Iterable[int] | None) -> tuple[list[tuple[dict[str, Any], int]], set[int]]:
    """The node objects (status capacity/allocatable of ``nvidia.com/gpu``) in ``lines``, each with the
    1-based line of its last figure; and the 1-based lines used.  ``where``: the lines that may hold the
    key (all when None)."""
    figures: list[tuple[str, str, str | int, int]] = []  # (capacity|allocatable|label, name, value, line)
    for k in range(len(lines)) if where is None else where:
        line = lines[k]
        if KEY not in line and MIG_KEY not in line and LABEL_KEY not in line:
            continue
        lab = _LABEL.match(line)
        if lab is not None:
            figures.append(("label", lab.group("k"), lab.group("v"), k))
            continue
        m = _RES.match(line)
        if m is not None:
            head = _header(lines, k)
            if head is not None:
                figures.append((head, m.group("r"), int(m.group("n")), k))
            continue
        for i in _INLINE.finditer(line):
            figures.extend(
                (i.group("k"), r.group("r"), int(r.group("n")), k) for r in _INLINE_RES.finditer(i["body"])
            )
    nodes: list[tuple[dict[str, Any], int]] = []
    used: set[int] = set()
    cur: dict[str, dict[str, tuple[int, int]]] = {}  # capacity|allocatable -> resource -> (value, line)
    labels: dict[str, tuple[str, int]] = {}  # the labels seen since the last node, for the next one
    last = ""

    def flush() -> None:
        at = [k for _, k in (*(x for m in cur.values() for x in m.values()), *labels.values())]
        if len(cur) == 2 or labels and not cur:
            meta: dict[str, Any] = {"name": _name(lines, min(at)) or "?"}
            if labels:
                meta["labels"] = {key: v for key, (v, _) in labels.items()}
            status = {kind: {r: str(v) for r, (v, _) in res.items()} for kind, res in cur.items()}
            nodes.append(({"metadata": meta, "status": status}, max(at) + 1))
            used.update(k + 1 for k in at)
        cur.clear()
        labels.clear()

    for kind, name, value, k in figures:
        if kind == "label":  # a label belongs to the node whose figures follow it
            if len(cur) == 2:
                flush()
            labels[name] = (str(value), k)
            continue
        if kind in cur and (name in cur[kind] or last != kind):  # a map again: the next node
            flush()
        cur.setdefault(kind, {})[name] = (int(value), k)
        last = kind
    flush()
    return nodes, used
