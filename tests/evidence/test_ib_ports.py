"""InfiniBand/RoCE port listings (ibstat, ibstatus, ibv_devinfo, rdma link): the port states that are faults
come from the error signatures fabric.ib_port_down / fabric.ib_port_init, an Active port below its adapter's
rate from the reader (sources/ib_ports.py, knowledge/data/hca_specs.json), and a listing of healthy ports is
read (doctor: HEALTHY, not "not recognised").  NCCL's transport: channels via NET/Socket are a warning,
"No device found"/"Using network Socket" alone only a note."""

from __future__ import annotations

from pathlib import Path

import pytest

from bothpaths import both_paths
from gpuclinic.diagnose import diagnose
from gpuclinic.explain import explain_text
from gpuclinic.knowledge import load_data
from gpuclinic.sources import evidence, ib_ports


def _ibstat(ca_type: str, state: str, phys: str, rate: str, indent: str = "\t") -> str:
    return (
        f"CA 'mlx5_0'\n{indent}CA type: {ca_type}\n{indent}Number of ports: 1\n{indent}Port 1:\n"
        f"{indent * 2}State: {state}\n{indent * 2}Physical state: {phys}\n{indent * 2}Rate: {rate}\n"
        f"{indent * 2}Base lid: 13\n{indent * 2}Link layer: InfiniBand\n"
    )


# ibstatus as infiniband-diags prints it (port 2 of a ConnectX-3 without a cable)
IBSTATUS = (
    "Infiniband device 'mlx4_0' port 1 status:\n"
    "\tdefault gid:\t fe80:0000:0000:0000:e41d:2d03:00e4:d711\n\tbase lid:\t 0x1\n\tsm lid:\t\t 0x1\n"
    "\tstate:\t\t 4: ACTIVE\n\tphys state:\t 5: LinkUp\n\trate:\t\t 40 Gb/sec (4X FDR10)\n"
    "\tlink_layer:\t InfiniBand\n\n"
    "Infiniband device 'mlx4_0' port 2 status:\n"
    "\tdefault gid:\t fe80:0000:0000:0000:e41d:2d03:00e4:d712\n\tbase lid:\t 0x0\n\tsm lid:\t\t 0x0\n"
    "\tstate:\t\t 1: DOWN\n\tphys state:\t 2: Polling\n\trate:\t\t 10 Gb/sec (4X)\n"
    "\tlink_layer:\t InfiniBand\n"
)
DEVINFO_INIT = (
    "hca_id:\tmlx5_1\n\ttransport:\t\t\tInfiniBand (0)\n\tvendor_part_id:\t\t\t4123\n"
    "\tphys_port_cnt:\t\t\t1\n\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_INIT (2)\n"
    "\t\t\tmax_mtu:\t\t4096 (5)\n\t\t\tlink_layer:\t\tInfiniBand\n"
)


def _serious(codes: dict[str, str]) -> dict[str, str]:
    return {c: s for c, s in codes.items() if s in ("warning", "critical")}


@pytest.mark.parametrize("indent", ["\t", "    ", ""])
def test_ndr_port_at_100_is_degraded(tmp_path: Path, indent: str) -> None:
    for codes in both_paths(tmp_path, _ibstat("MT4129", "Active", "LinkUp", "100", indent)):
        assert _serious(codes) == {"fabric.ib_rate_degraded": "warning"}, codes


@pytest.mark.parametrize(
    ("ca_type", "rate"), [("MT4129", "400"), ("MT4129", "200"), ("MT4123", "100"), ("MT9999", "10")]
)
def test_full_or_design_rate_or_unknown_adapter_is_healthy(tmp_path: Path, ca_type: str, rate: str) -> None:
    """Half the maximum (NDR200, HDR100 split ports) is a design choice; an unknown CA type is not judged."""
    for codes in both_paths(tmp_path, _ibstat(ca_type, "Active", "LinkUp", rate)):
        assert not _serious(codes), codes


def test_the_threshold_is_knowledge_data() -> None:
    spec = load_data("hca_specs.json")
    port = ib_ports.IbPort(ca="mlx5_0", port="1", lineno=1, state="active", rate_gbps=100.0, ca_type="MT4129")
    top = spec["adapters"]["MT4129"]["max_rate_gbps"]
    assert (100.0 < top * spec["rate_degraded_fraction"]) == (ib_ports.degraded(port) is not None)


@pytest.mark.parametrize(
    ("text", "code"),
    [
        (_ibstat("MT4129", "Down", "Polling", "10"), "error.fabric.ib_port_down"),
        (_ibstat("MT4125", "Down", "Disabled", "10"), "error.fabric.ib_port_down"),
        (_ibstat("MT4123", "Initializing", "LinkUp", "200"), "error.fabric.ib_port_init"),
        (IBSTATUS, "error.fabric.ib_port_down"),
        (DEVINFO_INIT, "error.fabric.ib_port_init"),
        (
            "link mlx5_3/1 subnet_prefix fe80:0000:0000:0000 lid 65535 sm_lid 0 lmc 0 state DOWN "
            "physical_state POLLING\n",
            "error.fabric.ib_port_down",
        ),
    ],
)
def test_port_state_faults(tmp_path: Path, text: str, code: str) -> None:
    for codes in both_paths(tmp_path, text):
        assert _serious(codes) == {code: "warning"}, codes


def test_parse_reads_every_listing_and_its_adapter() -> None:
    text = _ibstat("MT4129", "Active", "LinkUp", "400") + "\n" + IBSTATUS + "\n" + DEVINFO_INIT
    lines = text.splitlines()
    ports, used = ib_ports.parse(lines)
    got = [(p.ca, p.port, p.state, p.phys, p.rate_gbps, p.ca_type) for p in ports]
    assert got == [
        ("mlx5_0", "1", "active", "linkup", 400.0, "MT4129"),
        ("mlx4_0", "1", "active", "linkup", 40.0, ""),
        ("mlx4_0", "2", "down", "polling", 10.0, ""),
        ("mlx5_1", "1", "init", "", None, "MT4123"),
    ]
    assert len(used) == sum(1 for ln in lines if ln.strip())  # every line of the listings is claimed


def test_healthy_listing_is_read_not_unrecognised(tmp_path: Path) -> None:
    p = tmp_path / "ibstat.txt"
    p.write_text(_ibstat("MT4129", "Active", "LinkUp", "400"))
    snap = evidence.load_evidence([str(p)])
    assert any("InfiniBand/RDMA ports read (1): mlx5_0/1 active linkup 400 Gb/s" in n for n in snap.notes)
    assert not _serious({f.code: f.severity.name.lower() for f in diagnose(snap).findings})


def test_ibdev2netdev_down_is_not_a_port_fault(tmp_path: Path) -> None:
    """ibdev2netdev's (Down) is the IPoIB netdev, not the IB port."""
    text = "mlx5_0 port 1 ==> ibp26s0 (Down)\nmlx5_1 port 1 ==> enp27s0f0np0 (Up)\n"
    assert not _serious({f.code: f.severity.name.lower() for f in explain_text(text, "x").findings})


@pytest.mark.parametrize(
    ("line", "severity"),
    [
        ("h:926:1151 [7] NCCL INFO Channel 03/0 : 15[7] -> 6[6] [send] via NET/Socket/3", "warning"),
        ("h:1:1 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]", "warning"),
        ("h:1:1 [0] NCCL INFO NET/IB : No device found.", "info"),
        ("h:1:1 [0] NCCL INFO Using network Socket", "info"),
    ],
)
def test_nccl_socket_transport(line: str, severity: str) -> None:
    codes = {f.code: f.severity.name.lower() for f in explain_text(line + "\n", "x").findings}
    want = "error.nccl.socket_transport" if severity == "warning" else "error.nccl.net_socket_only"
    assert codes.get(want) == severity, codes
    assert "error.nccl.generic" not in codes  # the specific signature names the libibverbs WARN


@pytest.mark.parametrize(
    "line",
    [
        "h:1:1 [0] NCCL INFO Channel 03/0 : 5[5] -> 12[4] [send] via NET/IB/3/GDRDMA",
        "h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB enp41s0f1:<0>",
        "h:1:1 [0] NCCL INFO NET/Socket : Using [0]enp41s0f1:<0>",
        "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
    ],
)
def test_nccl_ib_and_p2p_transports_are_quiet(line: str) -> None:
    assert not explain_text(line + "\n", "x").findings or all(
        f.severity.name.lower() == "info" for f in explain_text(line + "\n", "x").findings
    )


def test_listing_inside_a_big_log_is_read(tmp_path: Path) -> None:
    """A big input is visited only on its literal hits: the listing's keys are among them."""
    filler = "".join(f"step {i} loss 0.{i % 97:02d} lr 1e-4\n" for i in range(3000))
    text = filler + _ibstat("MT4129", "Active", "LinkUp", "100") + filler
    for codes in both_paths(tmp_path, text):
        assert _serious(codes) == {"fabric.ib_rate_degraded": "warning"}, codes


@pytest.mark.parametrize(
    "line",
    [
        "learn01:1:2 [3] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'",
        "m:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for GPU 0[0] / HCA 0 (distance 4 > 2)",
    ],
)
def test_gdr_disabled_is_a_warning(line: str) -> None:
    codes = {f.code: f.severity.name.lower() for f in explain_text(line + "\n", "x").findings}
    assert codes == {"error.nccl.gdr_disabled": "warning"}, codes


def test_gdr_enabled_is_quiet() -> None:
    line = "m:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA (nvidia-peermem) enabled for HCA 0 'mlx5_0'\n"
    assert not _serious({f.code: f.severity.name.lower() for f in explain_text(line, "x").findings})


@pytest.mark.parametrize(
    ("line", "want"),
    [
        ("# Out of bounds values : 248 FAILED", {"error.nccl.tests_wrong_results": "critical"}),
        ("` Out of bounds values : 56 FAILED`", {"error.nccl.tests_wrong_results": "critical"}),
        ("# Out of bounds values : 0 OK", {}),
    ],
)
def test_nccl_tests_validation(line: str, want: dict[str, str]) -> None:
    codes = {f.code: f.severity.name.lower() for f in explain_text(line + "\n", "x").findings}
    assert _serious(codes) == want


def test_topo_names_each_gpus_nearest_nic_and_the_far_ones() -> None:
    from gpuclinic.sources import smi_topo

    text = (
        "        GPU0    GPU1    NIC0    NIC1    CPU Affinity    NUMA Affinity\n"
        "GPU0     X      NV18    PIX     SYS     0-31    0\n"
        "GPU1    NV18     X      SYS     SYS     32-63   1\n"
        "NIC0    PIX     SYS      X      SYS\n"
        "NIC1    SYS     SYS     SYS      X\n"
    )
    notes = smi_topo.parse(text).notes()
    assert "GPU nearest NIC: GPU0 NIC0 (PIX); GPU1 NIC0 (SYS)" in notes, notes
    assert any(n.startswith("GPUs with no NIC on their PCIe switch: GPU1 (SYS):") for n in notes), notes
