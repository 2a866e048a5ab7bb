"""Items that reuse other parts of gpuclinic: health (the doctor pipeline), network (the ``net``
probes and checks) and ``dcgmi diag`` when DCGM is installed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

from gpuclinic.accept.model import Item, skipped
from gpuclinic.diagnose import Report
from gpuclinic.facts.network import NetworkFacts
from gpuclinic.model import Severity


def health_item(report: Report) -> Item:
    """doctor's verdict as one item: healthy pass, warning warn, drain fail."""
    snap = report.snapshot
    if not snap.gpus and snap.nvml_available is False:
        why = next((s.why for s in snap.skipped if "NVML" in s.what or "GPU" in s.what), "no GPU facts")
        return skipped("health", "doctor verdict", "health", f"could not check GPUs: {why}")
    st = {"healthy": "pass", "warning": "warn", "drain": "fail"}[report.verdict.value]
    top = [f for f in report.findings if f.severity >= Severity.WARNING]
    why = "; ".join(f"{f.code}{' ' + f.gpu.label() if f.gpu else ''}: {f.title}" for f in top[:4])
    if len(top) > 4:
        why += f"; +{len(top) - 4} more"
    return Item("health", "doctor verdict", "health", st, None, report.verdict.value, "healthy", "",
                "doctor checks", "gpuclinic doctor", why or f"{len(snap.gpus)} GPUs checked, nothing found",
                data={"codes": sorted({f.code for f in report.findings})})


def network_items(nf: NetworkFacts, report: Report | None) -> list[Item]:
    """One item per probed endpoint (reachable, time to first byte, throughput) and the net verdict."""
    items: list[Item] = []
    for p in nf.probes:
        iid = f"network.{p.endpoint.id}"
        title = f"reach {p.host}"
        rate = p.best_rate()
        if p.reachable:
            meas: float | str | None = (
                round(rate / 1e6, 1) if rate else (round(p.ttfb_ms) if p.ttfb_ms else "ok")
            )
            unit = "MB/s" if rate else "ms TTFB"
            items.append(
                Item(
                    iid,
                    title,
                    "network",
                    "pass",
                    None,
                    meas,
                    None,
                    unit,
                    p.endpoint.kind,
                    p.endpoint.source,
                    "",
                )
            )
        else:
            why = p.error() or ("deadline hit" if p.deadline_hit else "no answer")
            items.append(
                Item(
                    iid,
                    title,
                    "network",
                    "fail" if p.endpoint.kind == "origin" else "warn",
                    None,
                    "unreachable",
                    "reachable",
                    "",
                    p.endpoint.kind,
                    p.endpoint.source,
                    str(why),
                )
            )
    if report is not None:
        st = {"healthy": "pass", "warning": "warn", "drain": "fail"}[report.verdict.value]
        top = [f for f in report.findings if f.severity >= Severity.WARNING]
        items.append(
            Item(
                "network.diagnosis",
                "network checks",
                "network",
                st,
                None,
                report.verdict.value,
                "healthy",
                "",
                "gpuclinic net checks",
                "gpuclinic net",
                "; ".join(f"{f.code}: {f.title}" for f in top[:3]) or f"{len(nf.probes)} endpoints probed",
            )
        )
    return items


def _walk_dcgm(obj: Any, out: list[tuple[str, str, str]], name: str = "") -> None:
    """Collect (test name, status, info) from dcgmi diag -j output (the layout changed across DCGM
    versions: "test_categories" -> "tests" -> "results" with "status"; older ones nest the same)."""
    if isinstance(obj, dict):
        nm = str(obj.get("name") or obj.get("test_name") or name)
        st = obj.get("status")
        if isinstance(st, str) and ("results" not in obj or not isinstance(obj.get("results"), list)):
            info = obj.get("info") or obj.get("warnings") or obj.get("warning") or ""
            if isinstance(info, list):
                info = "; ".join(str(x.get("warning", x) if isinstance(x, dict) else x) for x in info)
            out.append((nm, st, str(info)[:200]))
        for v in obj.values():
            _walk_dcgm(v, out, nm)
    elif isinstance(obj, list):
        for v in obj:
            _walk_dcgm(v, out, name)


def parse_dcgmi(text: str) -> list[Item]:
    data = json.loads(text[text.find("{") :])
    found: list[tuple[str, str, str]] = []
    _walk_dcgm(data, found)
    per: dict[str, list[tuple[str, str]]] = {}
    for nm, st, info in found:
        per.setdefault(nm, []).append((st.lower(), info))
    items = []
    for nm, res in per.items():
        sts = {s for s, _ in res}
        st = "fail" if "fail" in sts else "warn" if "warn" in sts else "pass" if "pass" in sts else "skipped"
        why = "; ".join(i for s, i in res if i and s in ("fail", "warn"))[:300] or ", ".join(sorted(sts))
        items.append(
            Item(
                f"dcgm.{nm.lower().replace(' ', '_')}",
                f"dcgmi diag: {nm}",
                "dcgm",
                st,
                "all",
                "/".join(sorted(sts)),
                "pass",
                "",
                "DCGM diagnostic",
                "dcgmi diag -j",
                why,
            )
        )
    return items


def dcgm_items(level: int, timeout_s: float = 900.0) -> list[Item]:
    exe = shutil.which("dcgmi")
    if not exe:
        return [skipped("dcgm", "dcgmi diag", "dcgm", "dcgmi not installed (NVIDIA DCGM); nothing to add")]
    try:
        p = subprocess.run(
            [exe, "diag", "-r", str(level), "-j"], capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        return [skipped("dcgm", f"dcgmi diag -r {level}", "dcgm", f"did not finish within {timeout_s:.0f} s")]
    except OSError as e:
        return [skipped("dcgm", f"dcgmi diag -r {level}", "dcgm", f"could not run: {e}")]
    try:
        items = parse_dcgmi(p.stdout)
    except (ValueError, KeyError):
        line = (p.stderr or p.stdout).strip().splitlines()[-1:] or [f"exit {p.returncode}"]
        return [skipped("dcgm", f"dcgmi diag -r {level}", "dcgm", f"no JSON result: {line[0][:200]}")]
    return items or [skipped("dcgm", f"dcgmi diag -r {level}", "dcgm", "no test results in its output")]
