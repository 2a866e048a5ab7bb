"""Score gpuclinic's evidence reading on the labelled real-world corpus.

``tests/fixtures/realworld/corpus`` holds public texts (kernel logs, nvidia-smi output, tracebacks,
container and DCGM errors) and ``corpus/labels.json`` says what each one proves: the finding codes a correct
diagnosis emits and the facts (driver version, GPU count) it reads.  It also labels the older fixtures in
``realworld/errors`` and ``realworld/smi`` (keys with a folder, e.g. ``smi/table_....txt``).  This script runs both ways a user
hands text to gpuclinic, in-process:

* ``doctor --from FILE``: ``load_evidence([path])`` then ``diagnose``;
* ``explain FILE``: ``explain_text(text)`` (no live facts of this machine).

and prints, per input kind, the recall of the labelled codes and facts and the precision of the
warning/critical codes emitted, then every miss.  A labelled code ``a|b`` is found when either is
emitted; ``cuda.oom`` also matches the explain form ``error.cuda.oom``.  Codes listed under ``allowed``
are correct but not required (a second way to say the same), so they count for precision only.

Usage: ``python tools/corpus_score.py [--markdown] [--json]``.  Exit 0 always: it measures, the test in
``tests/realworld/test_corpus.py`` judges.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
REALWORLD = ROOT / "tests" / "fixtures" / "realworld"
CORPUS = REALWORLD / "corpus"
LABELS = CORPUS / "labels.json"
FACTS = ("driver_version", "gpu_count", "cuda_version")
PATHS = ("doctor", "explain")


@dataclass
class Run:
    """What one path (doctor or explain) made of one file."""

    codes: dict[str, str] = field(default_factory=dict)  # code -> severity label
    facts: dict[str, Any] = field(default_factory=dict)
    error: str | None = None  # "not recognised: ..." or "crash: ..."


@dataclass
class FileScore:
    name: str
    kind: str
    project: str
    healthy: bool
    runs: dict[str, Run]
    found: dict[str, list[str]]  # path -> labelled items found
    missed: dict[str, list[str]]  # path -> labelled items missed
    extra: dict[str, list[str]]  # path -> warning/critical codes not labelled or allowed
    items: int = 0


def load_labels(path: Path = LABELS) -> dict[str, dict[str, Any]]:
    data = json.loads(path.read_text())
    files: dict[str, dict[str, Any]] = data["files"]
    return files


def _facts_of(snap: Any) -> dict[str, Any]:
    sw = getattr(snap, "software", None)
    driver = snap.driver_version or (sw.proc_driver_version if sw is not None else None)
    return {"driver_version": driver, "gpu_count": len(snap.gpus) or None, "cuda_version": snap.cuda_driver_version}


def run_doctor(path: Path) -> Run:
    from gpuclinic.diagnose import diagnose
    from gpuclinic.errors import InputError
    from gpuclinic.sources.evidence import load_evidence

    try:
        snap = load_evidence([str(path)])
    except InputError as e:
        return Run(error=f"not recognised: {e}")
    except Exception as e:  # a parser bug is a measured miss, not the end of the run
        return Run(error=f"crash: {type(e).__name__}: {e}")
    try:
        report = diagnose(snap)
    except Exception as e:
        return Run(facts=_facts_of(snap), error=f"crash: {type(e).__name__}: {e}")
    return Run(codes={f.code: f.severity.name.lower() for f in report.findings}, facts=_facts_of(snap))


def run_explain(text: str, origin: str) -> Run:
    from gpuclinic.explain import explain_text, pasted_facts

    try:
        report = explain_text(text, origin)
    except Exception as e:
        return Run(error=f"crash: {type(e).__name__}: {e}")
    facts = _facts_of(report.snapshot)
    if not facts["driver_version"]:
        pasted = pasted_facts(text)
        facts["driver_version"] = pasted.driver_version if pasted is not None else None
    return Run(codes={f.code: f.severity.name.lower() for f in report.findings}, facts=facts)


def _alternatives(label: str) -> list[str]:
    return [a.strip() for a in label.split("|") if a.strip()]


def code_matches(label: str, emitted: str) -> bool:
    return any(emitted in (alt, "error." + alt) for alt in _alternatives(label))


def _fact_equal(want: Any, got: Any) -> bool:
    return got is not None and str(want) == str(got)


def score_file(name: str, label: dict[str, Any], runs: dict[str, Run]) -> FileScore:
    codes: list[str] = list(label.get("codes", []))
    allowed: list[str] = list(label.get("allowed", []))
    facts: dict[str, Any] = {k: v for k, v in label.get("facts", {}).items() if k in FACTS and v is not None}
    fs = FileScore(name=name, kind=label["kind"], project=label["project"], healthy=bool(label.get("healthy")),
                   runs=runs, found={}, missed={}, extra={}, items=len(codes) + len(facts))
    for p, run in runs.items():
        found: list[str] = []
        missed: list[str] = []
        for c in codes:
            (found if any(code_matches(c, e) for e in run.codes) else missed).append(c)
        for k, v in facts.items():
            (found if _fact_equal(v, run.facts.get(k)) else missed).append(f"{k}={v}")
        fs.found[p], fs.missed[p] = found, missed
        fs.extra[p] = sorted(e for e, sev in run.codes.items() if sev in ("warning", "critical")
                             and not any(code_matches(c, e) for c in codes + allowed))
    return fs


def path_of(name: str) -> Path:
    """A label key: a corpus file name, or ``errors/...`` / ``smi/...`` for the older fixtures."""
    return REALWORLD / name if "/" in name else CORPUS / name


def read_text(path: Path) -> str:
    """The text a user would paste: a ``.gz`` file (a whole nvidia-bug-report.log.gz) is decompressed."""
    if path.suffix == ".gz":
        import gzip

        return gzip.decompress(path.read_bytes()).decode("utf-8", errors="replace")
    return path.read_text(encoding="utf-8", errors="replace")


def score_corpus(names: Iterable[str] | None = None) -> list[FileScore]:
    labels = load_labels()
    out: list[FileScore] = []
    for name in sorted(names if names is not None else labels):
        path = path_of(name)
        text = read_text(path)
        runs = {"doctor": run_doctor(path), "explain": run_explain(text, name)}
        out.append(score_file(name, labels[name], runs))
    return out


@dataclass
class KindRow:
    kind: str
    files: int = 0
    items: int = 0
    found: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PATHS, 0))
    emitted: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PATHS, 0))
    wrong: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PATHS, 0))
    healthy: int = 0
    healthy_noisy: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PATHS, 0))

    def recall(self, p: str) -> float | None:
        return self.found[p] / self.items if self.items else None

    def precision(self, p: str) -> float | None:
        return (self.emitted[p] - self.wrong[p]) / self.emitted[p] if self.emitted[p] else None


def table(scores: list[FileScore]) -> list[KindRow]:
    rows: dict[str, KindRow] = {}
    total = KindRow("all")
    for s in scores:
        for row in (rows.setdefault(s.kind, KindRow(s.kind)), total):
            row.files += 1
            row.items += s.items
            row.healthy += s.healthy
            for p in PATHS:
                row.found[p] += len(s.found[p])
                serious = [c for c, sev in s.runs[p].codes.items() if sev in ("warning", "critical")]
                row.emitted[p] += len(serious)
                row.wrong[p] += len(s.extra[p])
                if s.healthy and serious:
                    row.healthy_noisy[p] += 1
    return [rows[k] for k in sorted(rows)] + [total]


def _f(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}"


def render_table(rows: list[KindRow]) -> str:
    head = ("| kind | files | labelled items | recall doctor | recall explain | precision doctor | precision explain "
            "| healthy files | healthy with warning/critical (doctor / explain) |")
    lines = [head, "|" + " --- |" * 9]
    for r in rows:
        lines.append(f"| {r.kind} | {r.files} | {r.items} | {_f(r.recall('doctor'))} | {_f(r.recall('explain'))} "
                     f"| {_f(r.precision('doctor'))} | {_f(r.precision('explain'))} | {r.healthy} "
                     f"| {r.healthy_noisy['doctor']} / {r.healthy_noisy['explain']} |")
    return "\n".join(lines)


def render_misses(scores: list[FileScore]) -> str:
    lines: list[str] = []
    for s in scores:
        parts: list[str] = []
        for p in PATHS:
            run = s.runs[p]
            bits: list[str] = []
            if s.missed[p]:
                bits.append("missed " + ", ".join(s.missed[p]))
            if s.extra[p]:
                bits.append("unlabelled " + ", ".join(s.extra[p]))
            if run.error and (s.missed[p] or s.extra[p]):
                bits.append("input rejected as not recognised" if run.error.startswith("not recognised")
                            else run.error.splitlines()[0][:140])
            if bits:
                parts.append(f"{p}: " + "; ".join(bits))
        if parts:
            lines.append(f"- `{s.name}` ({s.kind}): " + " | ".join(parts))
    return "\n".join(lines) or "(none)"


def as_json(scores: list[FileScore]) -> dict[str, Any]:
    rows = table(scores)
    return {
        "kinds": {r.kind: {"files": r.files, "items": r.items,
                           **{f"recall_{p}": r.recall(p) for p in PATHS},
                           **{f"precision_{p}": r.precision(p) for p in PATHS},
                           "healthy": r.healthy, **{f"healthy_noisy_{p}": r.healthy_noisy[p] for p in PATHS}}
                  for r in rows},
        "files": {s.name: {"kind": s.kind, "missed": s.missed, "unlabelled": s.extra,
                           "emitted": {p: s.runs[p].codes for p in PATHS},
                           "errors": {p: s.runs[p].error for p in PATHS if s.runs[p].error}} for s in scores},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--json", action="store_true", help="print the per-kind numbers and per-file results as JSON")
    ap.add_argument("files", nargs="*", help="only these corpus files (names in labels.json)")
    args = ap.parse_args(argv)
    scores = score_corpus(args.files or None)
    if args.json:
        print(json.dumps(as_json(scores), indent=1, sort_keys=True))
        return 0
    print(render_table(table(scores)))
    print()
    print("Misses (labelled item not found, or a warning/critical code nobody labelled):")
    print(render_misses(scores))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # piped into head
        sys.stderr.close()
