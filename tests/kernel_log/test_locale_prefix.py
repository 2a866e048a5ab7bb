"""Syslog/journal stamps in a non-English locale ("фев 12 00:48:02 kernel:", "jan. 29 ... host kernel:")
are kernel-log lines: their AER records are read, not dropped as unrecognised text."""

from __future__ import annotations

from gpuclinic.sources.kernellog import is_kernel_line, parse_lines

RU = "фев 12 00:48:02 kernel: pcieport 0000:00:1c.5: AER: Corrected error received: 0000:00:1c.5"
NL = "jan. 29 20:50:17 kevin kernel: pcieport 0000:00:1c.5: AER: Corrected error received: id=00e5"


def test_localised_month_stamp_is_a_kernel_line() -> None:
    assert is_kernel_line(RU)
    assert is_kernel_line(NL)
    assert not is_kernel_line("mai 3 10:11:12 this is prose about the kernel")


def test_localised_stamp_is_taken_off_and_the_aer_record_read() -> None:
    lines = [
        NL,
        "jan. 29 20:50:17 kevin kernel: pcieport 0000:00:1c.5: PCIe Bus Error: severity=Corrected, "
        "type=Physical Layer, id=00e5(Receiver ID)",
        "jan. 29 20:50:17 kevin kernel: pcieport 0000:00:1c.5:   device [8086:9d15] "
        "error status/mask=00000001/00002000",
        "jan. 29 20:50:17 kevin kernel: pcieport 0000:00:1c.5:    [ 0] Receiver Error ",
    ]
    evs = list(parse_lines(lines))
    aer = [e for e in evs if e.kind == "aer"]
    assert aer, [e.kind for e in evs]
    assert aer[0].pci_bus_id is not None and aer[0].pci_bus_id.endswith("00:1c.5")


def test_line_numbered_dmesg_is_read() -> None:
    """`grep -n` / editor line numbers before the stamp ("1701 [  22.3] ...", "1700:[ ...]") are taken off."""
    limited = (
        "mlx5_core 0000:63:00.0: 126.028 Gb/s available PCIe bandwidth, limited by 16.0 GT/s PCIe x8 link at "
        "0000:60:01.0 (capable of 504.112 Gb/s with 32.0 GT/s PCIe x16 link)"
    )
    for prefix in ("1701 [   22.325345] ", "1700:[   22.325345] ", "1702-[   22.325345] "):
        line = prefix + limited
        assert is_kernel_line(line), line
        evs = list(parse_lines([line]))
        assert evs and evs[0].uptime_s == 22.325345, (line, [(e.kind, e.uptime_s) for e in evs])
    assert not is_kernel_line("1701 apples [x] are not a kernel line")
