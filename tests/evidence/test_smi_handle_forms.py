"""nvidia-smi's "Unable to determine the device handle" in the forms people paste, each naming the lost
GPU's bus: no space (Synology P4), a space (OGKM 387), an index first ("GPU0: 0000:09:00.0", OGKM 1342,
which named no GPU before) and a three-digit domain as typed (dcgm-exporter 604, read as domain 0000)."""

from __future__ import annotations

import pytest

from gpuclinic.sources.smi_common import scan_error_lines


@pytest.mark.parametrize(
    ("line", "bus"),
    [
        ("Unable to determine the device handle for GPU0000:07:00.0: Unknown Error", "0000:07:00.0"),
        ("Unable to determine the device handle for GPU 0000:0B:00.0: Unknown Error", "0000:0B:00.0"),
        ("nvidia-smi starts reporting Unable to determine the device handle for GPU0: 0000:09:00.0: Unknown "
         "Error / No devices were found", "0000:09:00.0"),
        ("Unable to determine the device handle for GPU 000:BA:80.0: Unknown Error", "0000:BA:80.0"),
    ],
)
def test_handle_lines_name_the_bus(line: str, bus: str) -> None:
    _errors, lost = scan_error_lines([line])
    assert [b.lower() for b, _ in lost] == [bus.lower()]
