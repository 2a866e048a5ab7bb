"""Runbooks as data: one procedure per root-cause code (``knowledge/data/runbooks/*.toml``).

Each runbook has numbered steps (what to do, the exact commands, who acts, the safety check before a
disruptive step), the evidence to attach and how to verify the fix.  Steps may pull in a shared step
(``use = "drain"``) from ``common.toml``.  Commands are filled in with the GPU's index, bus id and UUID.
"""

from __future__ import annotations

import json
import os
import sys
from functools import cache
from typing import Any

from gpuclinic.model import GpuRef
from gpuclinic.record import field, record

WHO = {
    "you": "you (the operator)",
    "provider": "the provider (hosting / datacenter)",
    "rma": "RMA (replace the part)",
}
_DIR = os.path.join(os.path.dirname(__file__), "data", "runbooks")


@record(frozen=True)
class Step:
    """One runbook step: what to do, the commands, who acts and the safety check first."""

    do: str
    run: tuple[str, ...] = ()
    who: str = "you"
    safety: str | None = None
    disruptive: bool = False


@record(frozen=True)
class Runbook:
    """A procedure for one root cause: its steps, the evidence to attach and how to verify."""

    id: str
    title: str
    who: str
    source: str
    steps: tuple[Step, ...]
    evidence: tuple[str, ...] = ()
    verify: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)


def _cache_paths() -> list[str]:
    """Where the parsed runbooks may be cached: next to the data (as Python's own __pycache__), else the
    user's cache directory."""
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return [
        os.path.join(_DIR, "__pycache__", "runbooks.json"),
        os.path.join(xdg, "gpuclinic", "runbooks.json"),
    ]


def _load_files() -> list[dict[str, Any]]:
    """The parsed TOML files.  Parsing them costs a third of a `doctor` run, so the result is cached as
    JSON keyed by each file's name, size and mtime (a changed or added file misses the cache)."""
    names = sorted(n for n in os.listdir(_DIR) if n.endswith(".toml"))
    key: list[Any] = [_DIR]  # the user cache may be shared by several installs
    for n in names:
        st = os.stat(os.path.join(_DIR, n))
        key.append([n, st.st_size, st.st_mtime_ns])
    for path in _cache_paths():
        try:
            with open(path, encoding="utf-8") as fh:
                cached = json.load(fh)
            if cached.get("key") == key and isinstance(cached.get("files"), list):
                return list(cached["files"])
        except (OSError, ValueError, AttributeError):
            continue
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib
    out = []
    for n in names:
        with open(os.path.join(_DIR, n), "rb") as fh:
            out.append(tomllib.load(fh))
    blob = json.dumps({"key": key, "files": out})
    for path in _cache_paths():
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write(blob)
            os.replace(tmp, path)
            break
        except OSError:
            continue
    return out


@cache
def _raw() -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """(runbook entries by id, shared steps by name) from the files; a Runbook is built per id asked
    for (doctor needs the first step of one or two, not all of them)."""
    files = _load_files()
    common: dict[str, dict[str, Any]] = {}
    for f in files:
        common.update(f.get("common", {}))
    by_id: dict[str, dict[str, Any]] = {}
    for f in files:
        for r in f.get("runbook", []):
            if r["id"] in by_id:
                raise ValueError(f"runbook {r['id']} is defined twice")
            by_id[r["id"]] = r
    return by_id, common


@cache
def _build(rid: str) -> Runbook | None:
    by_id, common = _raw()
    r = by_id.get(rid)
    if r is None:
        return None
    steps = []
    for s in r.get("step", []):
        base = dict(common[s["use"]]) if "use" in s else {}
        # the runbook's own words win; the shared step brings its commands and safety check
        base.update({k: v for k, v in s.items() if k != "use"})
        steps.append(
            Step(
                do=base["do"].strip(),
                run=tuple(base.get("run") or ()),
                who=base.get("who", "you"),
                safety=base.get("safety"),
                disruptive=bool(base.get("disruptive")),
            )
        )
    return Runbook(
        id=r["id"],
        title=r["title"],
        who=r.get("who", "you"),
        source=r["source"],
        steps=tuple(steps),
        evidence=tuple(r.get("evidence") or ()),
        verify=tuple(r.get("verify") or ()),
    )


def _all() -> dict[str, Runbook]:
    return {rid: rb for rid in _raw()[0] if (rb := _build(rid)) is not None}


def all_runbooks() -> list[Runbook]:
    return [v for _, v in sorted(_all().items())]


def get(code_or_id: str) -> Runbook | None:
    """The runbook for a code (``xid.79`` -> ``xid.reboot``, ``gpu.missing`` -> ``gpu.fallen_off_bus``) or
    an id."""
    rb = _build(code_or_id)
    if rb is not None:
        return rb
    from gpuclinic.knowledge.codes import info, runbook_id

    if info(code_or_id) is None:
        return None
    return _build(runbook_id(code_or_id))


def fill(text: str, gpu: GpuRef | None, code: str = "") -> str:
    """Put the GPU's index, bus id and UUID into a command; unknown values stay as <index> etc., or, for a
    GPU known by index, say how to look them up (``<bus id of GPU 4: run nvidia-smi -q -i 4>``)."""
    idx = gpu.index if gpu else None
    how = f" of GPU {idx}: run nvidia-smi -q -i {idx}>"
    vals = {
        "index": str(idx) if idx is not None else "<index>",
        "bus": gpu.pci_bus_id if gpu and gpu.pci_bus_id else "<bus id" + how if idx is not None else "<bus>",
        "uuid": gpu.uuid if gpu and gpu.uuid else "<UUID" + how if idx is not None else "<uuid>",
        "code": code or "<code>",
    }
    for k, v in vals.items():
        text = text.replace("{" + k + "}", v)
    return text


def first_step(code: str, gpu: GpuRef | None = None) -> str:
    """The runbook's first step in one line, filled in (renderers add the pointer to the rest)."""
    rb = get(code)
    if rb is None or not rb.steps:
        return ""
    s = rb.steps[0]
    cmd = f" `{fill(s.run[0].split('   #')[0].strip(), gpu, code)}`" if s.run else ""
    return f"{fill(s.do, gpu, code)}{cmd}"


def finding_remedy(code: str, gpu: GpuRef | None = None, own: str = "") -> str:
    """The remedy a finding carries: its runbook's first step, filled in for its GPU.  Detectors write
    no remedy text of their own (what is particular to one case goes in the finding's evidence);
    ``checks.run_checks`` sets this on every finding, so doctor, explain, watch, run, k8s and fleet show
    one text per code.  Kept as the detector gives it (``own``): a signature's fix (``error.*``, each
    from ``error_signatures.json`` with its source) and the codes of ``remedy_computed`` in codes.json,
    whose detector computes the exact fix from knowledge data (versions, commands, mirror lines)."""
    from gpuclinic.knowledge.codes import info, remedy_computed

    i = info(code)
    if own and i is not None and (i.default == "signature" or remedy_computed(code)):
        return own
    return first_step(code, gpu)


def runbook_command(code: str, gpu: GpuRef | None = None, *, markdown: bool = False) -> str:
    """The command that prints every step for ``code`` (``gpuclinic runbook xid.79 --gpu 3``): the one
    pointer doctor, explain, watch's alerts, run, the alert rules and the renderers all show."""
    idx = gpu.index if gpu is not None and gpu.index is not None else None
    return f"gpuclinic runbook {code}" + (f" --gpu {idx}" if idx is not None else "") + (
        " --markdown" if markdown else "")


def all_steps(code: str, gpu: GpuRef | None = None, *, markdown: bool = False) -> str:
    """The sentence that points at the whole runbook, after a first step (a remedy, an incident)."""
    return f"All steps: `{runbook_command(code, gpu, markdown=markdown)}`."


def remedy(code: str, gpu: GpuRef | None = None, step: str | None = None) -> str:
    """The one remedy text for ``code`` outside a full report: the runbook's first step (or ``step``, an
    incident's first step already chosen) and where the rest is.  watch's events and alerts, run's
    incidents and the supervisor show this, so no command words its own fix."""
    step = first_step(code, gpu) if step is None else step
    return (step + " " if step else "") + all_steps(code, gpu)


def render_text(rb: Runbook, gpu: GpuRef | None = None, code: str = "", markdown: bool = False) -> str:
    """The whole runbook as plain text or Markdown."""
    code = code or rb.id
    h = "# " if markdown else ""
    lines = [f"{h}{rb.title} ({code})", "", f"Who acts: {WHO.get(rb.who, rb.who)}", ""]
    for i, s in enumerate(rb.steps, 1):
        who = "" if s.who == "you" else f" [{WHO.get(s.who, s.who)}]"
        lines.append(f"{i}. {fill(s.do, gpu, code)}{who}")
        if s.safety:
            lines.append(
                f"   {'**Before you do this:**' if markdown else 'Before you do this:'} "
                f"{fill(s.safety, gpu, code)}"
            )
        for c in s.run:
            lines.append(f"   `{fill(c, gpu, code)}`" if markdown else f"   $ {fill(c, gpu, code)}")
    lines += ["", f"{'## ' if markdown else ''}Evidence to attach"]
    lines += [f"- `{fill(e, gpu, code)}`" if markdown else f"  $ {fill(e, gpu, code)}" for e in rb.evidence]
    lines += ["", f"{'## ' if markdown else ''}Verify the fix"]
    lines += [f"- `{fill(v, gpu, code)}`" if markdown else f"  $ {fill(v, gpu, code)}" for v in rb.verify]
    lines += ["", f"Source: {rb.source}"]
    return "\n".join(lines)
