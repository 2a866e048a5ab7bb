"""Findings -> incidents: one root cause with the symptoms it explains.

One fault shows up as many findings (an Xid 79, NVML "GPU lost", a GPU count that dropped, AER on the
port).  The rules in ``knowledge/data/correlation.json`` say which cause code explains which symptom
codes and how they must be related (same GPU, same PCI path, a time window, the cause first).  A
person then reads one incident per cause and follows one runbook.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import cache

from gpuclinic import lazyre
from gpuclinic.facts.snapshot import Snapshot, normalize_bus_id
from gpuclinic.knowledge import codes as K
from gpuclinic.knowledge import load_data
from gpuclinic.model import Finding, GpuRef, Incident
from gpuclinic.record import record

CORRELATION_FILE = "correlation.json"


@record(frozen=True)
class Rule:
    """A correlation rule from knowledge: a cause code, the symptoms it explains and how they relate."""

    cause: str
    explains: tuple[str, ...]
    match: str = "same_gpu"
    window_s: float | None = None
    cause_first: bool = False


@cache
def rules() -> tuple[Rule, ...]:
    out = []
    for r in load_data(CORRELATION_FILE)["rules"]:
        out.append(Rule(cause=r["cause"], explains=tuple(r["explains"]), match=r.get("match", "same_gpu"),
                        window_s=r.get("window_s"), cause_first=bool(r.get("cause_first"))))
    return tuple(out)


def code_matches(code: str, pattern: str) -> bool:
    """``xid.79`` matches ``xid.79``, ``xid.*`` and ``xid.class:hardware``."""
    if pattern == code:
        return True
    if pattern.endswith(".*"):
        return code.startswith(pattern[:-1])
    if pattern.startswith("xid.class:") and code.startswith("xid."):
        try:
            n = int(code.split(".", 1)[1])
        except ValueError:
            return False
        from gpuclinic.knowledge.xid import classify, lookup

        want = pattern.split(":", 1)[1]
        info = lookup(n)
        if info is not None and info.category == want:
            return True
        return bool(getattr(classify(n), want, False))
    return False


def _bus(ref: GpuRef | None) -> str | None:
    return normalize_bus_id(ref.pci_bus_id) if ref and ref.pci_bus_id else None


def same_gpu(a: GpuRef | None, b: GpuRef | None) -> bool:
    if a is None or b is None:
        return False
    if a.pci_bus_id and b.pci_bus_id:
        return normalize_bus_id(a.pci_bus_id) == normalize_bus_id(b.pci_bus_id)
    if a.uuid and b.uuid:
        return a.uuid == b.uuid
    return a.index is not None and a.index == b.index


def _ancestors(snap: Snapshot | None, bus: str) -> set[str]:
    """Bridges/ports above ``bus`` in the PCI tree the snapshot knows."""
    if snap is None:
        return set()
    parent = {normalize_bus_id(d.bus_id): normalize_bus_id(d.parent_bus_id)
              for d in snap.pci_devices if d.parent_bus_id}
    out: set[str] = set()
    cur = bus
    while cur in parent and parent[cur] not in out:
        cur = parent[cur]
        out.add(cur)
    return out


def _related(rule: Rule, cause: Finding, sym: Finding, snap: Snapshot | None) -> bool:
    if rule.match == "node":
        scope = True
    elif sym.gpu is None:
        scope = True  # a node-wide symptom (GPU count dropped) goes with the GPU cause that explains it
    elif cause.gpu is None:
        scope = False
    elif same_gpu(cause.gpu, sym.gpu):
        scope = True
    elif rule.match == "same_pci_path":
        cb, sb = _bus(cause.gpu), _bus(sym.gpu)
        scope = bool(cb and sb and (sb in _ancestors(snap, cb) or cb in _ancestors(snap, sb)))
    else:
        scope = False
    if not scope:
        return False
    tc, ts = _first_s(cause), _first_s(sym)
    if tc is not None and ts is not None:
        if rule.window_s is not None and abs(ts - tc) > rule.window_s:
            return False
        if rule.cause_first and tc > ts:
            return False
    elif rule.cause_first:
        return False  # "X then Y" needs both times
    return True


def _first_s(f: Finding) -> float | None:
    v = f.data.get("first_s")
    return float(v) if isinstance(v, (int, float)) else None


_CAUSED_BY = lazyre.compile(r"caused by previous Xid (\d+)", re.I)


def _stated_causes(f: Finding) -> list[int]:
    """Xids a finding says caused it: ``data.caused_by`` or a 'caused by previous Xid N' line."""
    out: list[int] = []
    cb = f.data.get("caused_by")
    if isinstance(cb, list):
        out += [int(x) for x in cb if isinstance(x, int)]
    for line in f.evidence:
        out += [int(m) for m in _CAUSED_BY.findall(line)]
    return out


def incident_id(code: str, gpu: GpuRef | None) -> str:
    """Stable across runs and ticks, so watch alerts once per incident."""
    where = _bus(gpu) or (gpu.uuid if gpu and gpu.uuid else None) or (
        f"gpu{gpu.index}" if gpu and gpu.index is not None else "node")
    return f"{code}@{where}"


def _edges(findings: list[Finding], snap: Snapshot | None,
           rs: Sequence[Rule]) -> tuple[list[list[int]], list[bool]]:
    """Cause index -> symptom indexes (rule order), and which findings another one explains.

    Findings are indexed by code (a log with a hundred findings has a dozen codes), so each rule and
    each "same code" pass looks only at the findings that can match: near-linear, same edges in the
    same order as comparing every pair.
    """
    n = len(findings)
    edges: list[list[int]] = [[] for _ in range(n)]
    has: list[set[int]] = [set() for _ in range(n)]
    explained = [False] * n
    by_code: dict[str, list[int]] = {}
    for i, f in enumerate(findings):
        by_code.setdefault(f.code, []).append(i)
    _rule_edges(findings, by_code, snap, rs, edges, has, explained)
    for idx in by_code.values():  # one code on one GPU is one problem (watch opens one event per reason)
        for k, ci in enumerate(idx):
            c = findings[ci]
            if c.gpu is None:
                continue
            for si in idx[k + 1:]:
                if si not in has[ci] and same_gpu(c.gpu, findings[si].gpu):
                    edges[ci].append(si)
                    has[ci].add(si)
                    explained[si] = True
    for si, f in enumerate(findings):  # stated chains: "caused by previous Xid N"
        for x in _stated_causes(f):
            cands = by_code.get(f"xid.{x}", [])
            cause_i = next(
                (i for i in cands if i != si and (f.gpu is None or same_gpu(findings[i].gpu, f.gpu))), None
            )
            if cause_i is not None and si not in has[cause_i]:
                edges[cause_i].insert(0, si)
                has[cause_i].add(si)
                explained[si] = True
    return edges, explained


@cache
def _matches(code: str, pattern: str) -> bool:
    return code_matches(code, pattern)


def _rule_edges(findings: list[Finding], by_code: dict[str, list[int]], snap: Snapshot | None,
                rs: Sequence[Rule], edges: list[list[int]], has: list[set[int]],
                explained: list[bool]) -> None:
    """The grouping rules: a cause finding explains the related findings its rule names."""
    for r in rs:
        causes = sorted(i for code, idx in by_code.items() if _matches(code, r.cause) for i in idx)
        if not causes:
            continue
        syms = sorted(
            i for code, idx in by_code.items() if any(_matches(code, p) for p in r.explains) for i in idx
        )
        for ci in causes:
            c = findings[ci]
            for si in syms:
                if si != ci and si not in has[ci] and _related(r, c, findings[si], snap):
                    edges[ci].append(si)
                    has[ci].add(si)
                    explained[si] = True


def group(findings: list[Finding], snap: Snapshot | None = None,
          first_step: Callable[[str, Finding], str] | None = None) -> list[Incident]:
    """Group ``findings`` (sorted worst first) into incidents; sets each finding's ``incident`` id.

    A finding that another finding explains is never a root; among the rest, causes named earlier in
    the rules come first.  Each root then takes in, transitively, the unclaimed findings it explains.
    """
    rs = rules()
    n = len(findings)
    edges, explained = _edges(findings, snap, rs)

    def rank(i: int) -> tuple[int, int]:
        ri = next((k for k, r in enumerate(rs) if _matches(findings[i].code, r.cause)), len(rs))
        return (ri, i)

    owner = [-1] * n
    groups: list[list[int]] = []
    order = sorted((i for i in range(n) if not explained[i]), key=rank) + sorted(
        (i for i in range(n) if explained[i]), key=rank
    )
    for root in order:
        if owner[root] >= 0:
            continue
        g = len(groups)
        owner[root] = g
        groups.append([root])
        stack = [root]
        while stack:
            cur = stack.pop(0)
            for sym in edges[cur]:
                if owner[sym] < 0:
                    owner[sym] = g
                    groups[g].append(sym)
                    stack.append(sym)
    out = [_incident([findings[i] for i in g], first_step) for g in groups]
    out.sort(key=lambda i: (-int(i.severity), i.id))
    return out


def _incident(ms: list[Finding], first_step: Callable[[str, Finding], str] | None) -> Incident:
    root = ms[0]
    gpu = root.gpu
    # a GPU-less cause is one GPU's only when all its symptoms are on that GPU (not hot inlet air)
    if gpu is None:
        refs = [m.gpu for m in ms if m.gpu is not None]
        gpu = refs[0] if refs and all(same_gpu(refs[0], r) for r in refs) else None
    iid = incident_id(root.code, gpu)
    rest = sorted(ms[1:], key=lambda f: (_first_s(f) is None, _first_s(f) or 0.0))
    evidence: list[str] = []
    seen: set[str] = set()
    for f in [root, *rest]:
        f.incident = iid
        for e in f.evidence:
            bare = e[len("kernel: ") :] if e.startswith("kernel: ") else e
            if bare not in seen:
                seen.add(bare)
                evidence.append(e)
    symptoms: list[str] = []
    for f in rest:
        if f.code not in symptoms and f.code != root.code:
            symptoms.append(f.code)
    info = K.info(root.code)
    # an Xid's and an error signature's family is the case's (a signature reports its category's family:
    # a registry reset is the network's, not "software" as the error.* wildcard entry says)
    return Incident(
        id=iid,
        code=root.code,
        severity=max(f.severity for f in ms),
        family=info.family if info is not None and info.code not in ("xid.*", "error.*") else root.family,
        title=root.title,
        gpu=gpu,
        symptoms=symptoms,
        evidence=evidence,
        runbook=K.runbook_id(root.code) if info is not None else "",
        first_step=first_step(root.code, root) if first_step else first_sentence(root.remedy),
    )


def first_sentence(text: str) -> str:
    t = (text or "").strip().splitlines()
    if not t:
        return ""
    line = re.sub(r"^\d+\.(?!\d)\s*", "", t[0])  # a list marker "1. ", not "5.00 GiB"
    return _SENTENCE_END.split(line, maxsplit=1)[0].rstrip(".") + "." if line else ""


_SENTENCE_END = lazyre.compile(
    r"(?<!\be\.g)(?<!\bi\.e)(?<!\betc)(?<!\bvs)(?<!\.)\. "
)  # not "e.g. ", "i.e. ", "... "
