"""One pasted text through both ways a user hands it to gpuclinic: ``doctor --from FILE`` and ``explain``
(the readers' tests assert the two agree)."""

from __future__ import annotations

from pathlib import Path

from gpuclinic.diagnose import diagnose
from gpuclinic.explain import explain_text
from gpuclinic.sources import evidence


def both_paths(tmp_path: Path, text: str) -> tuple[dict[str, str], dict[str, str]]:
    """(doctor's, explain's) findings of ``text``: code -> severity name."""
    p = tmp_path / "paste.txt"
    p.write_text(text)
    doctor = {f.code: f.severity.name.lower() for f in diagnose(evidence.load_evidence([str(p)])).findings}
    explain = {f.code: f.severity.name.lower() for f in explain_text(text, str(p)).findings}
    return doctor, explain
