"""``--json``: the versioned report schema (``gpuclinic.report/2``)."""

from __future__ import annotations

import json

from gpuclinic.diagnose import Report


def render_json(report: Report, *, include_facts: bool = True) -> str:
    return json.dumps(report.to_dict(include_facts=include_facts), indent=2, default=str)
