"""`gpuclinic net` and `doctor --net` end to end, against loopback servers only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuclinic.cli import cli
from gpuclinic.collect import CollectOptions, collect_live
from ports import free_port

from .servers import LoopbackFileServer


def invoke(args: list[str]) -> tuple[int, str]:
    """Run the CLI in-process; returns (exit code the real entry point would use, output)."""
    r = CliRunner().invoke(cli, args, standalone_mode=False)
    if r.exception is not None:
        raise r.exception
    return int(r.return_value or 0), r.output


def test_net_json_reports_probes_and_findings() -> None:
    dead = free_port()
    with LoopbackFileServer(per_conn_bps=2e6) as s:
        rc, out = invoke(["net", "--json", "--timeout", "20", "--endpoint", f"hf={s.url}#/big.bin",
                          "--endpoint", f"http://127.0.0.1:{dead}/"])
    assert rc == 1, out
    doc = json.loads(out)
    assert doc["command"] == "net" and doc["verdict"] == "warning"
    probes = doc["facts"]["network"]["probes"]
    assert len(probes) == 2
    assert probes[0]["http_status"] == 200 and probes[0]["parallel"]["bytes_per_s"] > 0
    assert probes[1]["connect_failures"] == probes[1]["connect_attempts"] > 0
    assert probes[1]["connect_failure_rate"] == 1.0 and probes[0]["connect_median"] is not None
    codes = {f["code"] for f in doc["findings"]}
    assert "network.endpoint_unreachable" in codes  # the custom endpoint refuses
    # the capped one is a mirror candidate, not in use: information, not a warning, but not silence either
    cap = [f for f in doc["findings"] if f["code"] == "network.per_connection_cap"]
    assert len(cap) == 1 and cap[0]["severity"] == "info" and "not in use" in cap[0]["title"]
    assert all(f["family"] == "network" for f in doc["findings"])


def test_net_terminal_table_and_quick() -> None:
    with LoopbackFileServer() as s:
        rc, out = invoke(["net", "--quick", "--endpoint", f"pypi={s.url}/simple/pip/"])
    assert rc == 0, out
    assert "Endpoint" in out and "TTFB" in out and "127.0.0.1" in out
    assert "(--quick: no throughput)" in out
    assert "Could not check" in out and "network throughput" in out


def test_net_markdown_table() -> None:
    with LoopbackFileServer() as s:
        rc, out = invoke(["net", "--quick", "--markdown", "--endpoint", s.url])
    assert rc == 0, out
    assert out.startswith("# gpuclinic net") and "| Endpoint | Host |" in out


def test_net_bad_endpoint_is_one_line_error() -> None:
    from gpuclinic.cli import main

    with pytest.raises(SystemExit) as ei:
        main(["net", "--endpoint", "ftp://nope"])
    assert ei.value.code == 64  # EXIT_USAGE


def test_doctor_net_includes_network_family(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dead = free_port()
    cfg = tmp_path / "network.toml"
    cfg.write_text(f'defaults = false\n[[endpoint]]\nurl = "http://127.0.0.1:{dead}"\nservice = "github"\n'
                   'kind = "origin"\nid = "github"\n')
    monkeypatch.setenv("GPUCLINIC_NETWORK_CONFIG", str(cfg))
    snap = collect_live(CollectOptions(network=True, quick=True, sources=["network"]))
    assert snap.network is not None and snap.network.probes[0].endpoint.id == "github"
    from gpuclinic.diagnose import diagnose

    rep = diagnose(snap)
    assert any(f.family.value == "network" for f in rep.findings)
    # without --net the source does not run at all
    snap2 = collect_live(CollectOptions(network=False, sources=["network"]))
    assert snap2.network is None


def test_net_verdict_first_and_no_all_clear_under_a_flagged_row() -> None:
    """Issue 14: the table came before the verdict header, and a "per-conn cap" row ended with
    "No problems found"."""
    with LoopbackFileServer(per_conn_bps=2e6) as s:
        rc, out = invoke(["net", "--timeout", "20", "--endpoint", f"hf={s.url}#/big.bin"])
        rc_md, md = invoke(["net", "--markdown", "--timeout", "20", "--endpoint", f"hf={s.url}#/big.bin"])
    lines = out.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("gpuclinic net"))
    table = next(i for i, ln in enumerate(lines) if ln.startswith("Endpoint"))
    assert head < table, out
    assert "per-conn cap" in out and "No problems found" not in out, out
    assert md.startswith("# gpuclinic net") and md.index("# gpuclinic net") < md.index("| Endpoint |")
    assert "per-conn cap" in md and "No problems found" not in md
