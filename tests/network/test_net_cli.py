"""`gpuclinic net` and `doctor --net` end to end, against loopback servers only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuclinic.cli import cli
from gpuclinic.collect import CollectOptions, collect_live

from .servers import LoopbackFileServer, free_port


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
    assert "network.per_connection_cap" not in codes  # the capped one is a mirror candidate, not in use
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
    assert out.startswith("| Endpoint | Host |")
    assert "# gpuclinic net" in out


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
