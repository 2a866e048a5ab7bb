"""``nvidia-smi dmon``: one row per GPU per second; the last row of each GPU as its current readings.

``nvidia-smi dmon`` prints a header naming its columns (``# gpu   pwr  gtemp  mtemp     sm    mem ...``;
drivers before ~470 say ``temp`` for the GPU temperature), a units row (``# Idx     W      C ...``), then
samples (``    0     70     42     48      -      - ...``, ``-`` where the GPU has no reading); ``-o DT``
adds date and time columns before ``gpu``, and ``-s`` picks other columns (``pviol tviol``, ``fb bar1``,
``rxpci txpci``, ``sbecc dbecc``).  The readings people paste it for (temperature, power, clocks, SM
busy, frame buffer in use) become GPU facts the heat and power checks judge; the other columns are not
facts of a GPU and are left alone.  ``nvidia-smi pmon`` (``# gpu  pid  type ...``) lists processes,
not GPUs: not read here.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuclinic import lazyre
from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.sources.smi_common import SmiDump

# the literals a dmon header holds (a big input is searched for them): "# gpu", or "gtemp" after "#Time" /
# "#Date  Time" (``-o T`` / ``-o DT``) on 470+ drivers
DMON_KEYS = ("# gpu", "gtemp")
_HEAD = lazyre.compile(r"^\s*#\s*(?P<pre>(?:Date\s+)?(?:Time\s+)?)gpu\s+(?P<cols>\S.*?)\s*$")
# column -> GpuFacts field (the GPU-temperature column is "gtemp" since ~470, "temp" before)
_FIELDS = {
    "pwr": "power_draw_w",
    "gtemp": "temperature_c",
    "temp": "temperature_c",
    "mtemp": "memory_temperature_c",
    "sm": "utilization_gpu_pct",
    "mem": "utilization_memory_pct",
    "mclk": "mem_clock_mhz",
    "pclk": "sm_clock_mhz",
    "fb": "memory_used_bytes",  # -s m: frame buffer in use, MB
}
_BYTES = {"fb": 1024 * 1024}  # columns in MB whose fact is in bytes


def header_columns(line: str) -> list[str] | None:
    """The column names of a ``dmon`` header line (``gpu`` first), or None for any other line (a ``pmon``
    header, whose rows are processes, included)."""
    m = _HEAD.match(line)
    if m is None:
        return None
    cols = m.group("cols").split()
    if "pid" in cols or not any(c in _FIELDS for c in cols):
        return None
    return [*m.group("pre").split(), "gpu", *cols]


def parse(numbered: Iterable[tuple[int, str]]) -> tuple[SmiDump, list[int]]:
    """The GPUs of the ``dmon`` samples in ``numbered`` (line number, line) and the line numbers used."""
    cols: list[str] | None = None
    last: dict[int, dict[str, str]] = {}
    used: list[int] = []
    for n, line in numbered:
        if line.lstrip().startswith("#"):
            head = header_columns(line)
            if head is not None:
                cols = head
                used.append(n)
            elif cols is not None and "Idx" in line.split()[:4]:  # the units row
                used.append(n)
            continue
        toks = line.split()
        if cols is None or len(toks) != len(cols):
            continue
        row = dict(zip(cols, toks, strict=True))
        if not row["gpu"].isdigit():
            continue
        last[int(row["gpu"])] = row
        used.append(n)
    dump = SmiDump(kind="smi_dmon")
    for idx, row in sorted(last.items()):
        g = GpuFacts(index=idx)
        for col, attr in _FIELDS.items():
            v = row.get(col)
            if v is not None and v.replace(".", "", 1).isdigit():
                setattr(g, attr, int(float(v) * _BYTES[col]) if col in _BYTES else float(v))
        dump.gpus.append(g)
    if dump.gpus:
        dump.notes.append(f"nvidia-smi dmon: the last sample of each of {len(dump.gpus)} GPU(s) read")
    return dump, used
