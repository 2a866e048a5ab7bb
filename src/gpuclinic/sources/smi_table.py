"""Parser for the plain ``nvidia-smi`` table (both the pre-525 and the wider 525+ layouts).

Besides the per-GPU rows it understands what people paste when things are broken: ``ERR!`` cells
(the GPU stopped answering: marked lost or unreadable), "No devices were found", "Unable to determine
the device handle for GPU ...: Unknown Error / GPU is lost", "NVIDIA-SMI has failed because it
couldn't communicate with the NVIDIA driver" and "Failed to initialize NVML: Driver/library version
mismatch".  Those statements are kept verbatim in ``SmiDump.errors`` for the software checks.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from gpuclinic import lazyre
from gpuclinic.facts.gpu import GpuFacts, GpuProcess
from gpuclinic.facts.snapshot import normalize_bus_id
from gpuclinic.sources import smi_common as c

MAX_LINE = 4096
_HEADER_RE = lazyre.compile(
    # 610+ drivers print "KMD Version:" / "CUDA UMD Version:" where older ones say "Driver" / "CUDA Version:"
    r"NVIDIA-SMI\s+(?P<smi>[\d.]+)\s+(?:Driver|KMD) Version:\s*(?P<drv>[\d.]+|N/A)(?:\s+CUDA "
    r"(?:UMD )?Version:\s*(?P<cuda>[\d.]+|N/A))?"
)
_BUS_RE = lazyre.compile(r"(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*(?P<disp>\S+)?")
_ROW1_RE = lazyre.compile(
    r"^\s*(?P<idx>\d+)\s+(?P<name>.*?)\s*(?P<pm>\bOn\b|\bOff\b|ERR!|N/A|TCC|WDDM|MCDM)?\s*$"
)
_ROW2_RE = lazyre.compile(
    r"^\s*(?P<fan>\S+)\s+(?P<temp>\S+)\s+(?P<perf>\S+)\s+(?:(?P<pwr>\S+)\s*/\s*(?P<cap>\S+))?\s*$"
)
_MEM_RE = lazyre.compile(r"(?P<used>\S+)\s*/\s*(?P<total>\S+)")
_PROC_RE = lazyre.compile(
    r"^\s*(?P<gpu>\d+)\s+(?:(?P<gi>\S+)\s+(?P<ci>\S+)\s+)?(?P<pid>\d+)\s+(?P<type>C\+G|M\+C|C|G|M)\s+"
    r"(?P<name>.*?)\s+(?P<mem>\d+MiB|N/A)\s*$"
)
_GPU_ROW_RE = lazyre.compile(
    r"^\|\s+\d+\s+[^|]*\|\s+[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]\s+\S+\s+\|[^|]*\|\s*$", re.M
)
_MIG_RE = lazyre.compile(r"^\s*(?P<gpu>\d+)\s+(?P<gi>\d+)\s+(?P<ci>\d+)\s+(?P<dev>\d+)\s*$")


def has_table(sample: str) -> bool:
    """True when ``sample`` holds an nvidia-smi table (its header line or a GPU row)."""
    # each regex needs its literal; the literal tests spare a scan of a prose sample
    return bool(
        ("NVIDIA-SMI" in sample and _HEADER_RE.search(sample))
        or ("|" in sample and _GPU_ROW_RE.search(sample))
    )


def has_errors(sample: str) -> bool:
    """True when ``sample`` holds one of nvidia-smi's failure statements."""
    if not c.may_hold_errors(sample):  # its lines are in it: no split needed to rule them out
        return False
    errors, _ = c.scan_error_lines(sample.splitlines()[:200])
    return bool(errors)


def looks_like(sample: str) -> bool:
    """True for a plain nvidia-smi table or an nvidia-smi error statement."""
    return has_table(sample) or has_errors(sample)


def _cells(line: str) -> list[str]:
    s = line.strip()
    if not (s.startswith("|") and s.endswith("|")):
        return []
    return [p for p in s[1:-1].split("|")]


def _is_err(v: str | None) -> bool:
    return bool(v) and "ERR!" in (v or "")


def parse(text: str | Iterable[str]) -> c.SmiDump:
    lines = text.splitlines() if isinstance(text, str) else [ln.rstrip("\r\n") for ln in text]
    lines = [ln for ln in lines if len(ln) <= MAX_LINE]
    dump = c.SmiDump(kind="smi_table")
    reader = _TableReader(dump)
    for line in lines:
        reader.feed(line)
    for g in dump.gpus:
        if id(g) not in reader.readings_seen and not g.lost:
            dump.partial.append(
                f"the nvidia-smi table ends inside GPU {g.index}'s row ({g.pci_bus_id}): its temperature, "
                "power, memory and utilisation are not in the input"
            )
    errors, lost = c.scan_error_lines(lines)
    dump.errors = errors
    c.mark_lost(dump.gpus, lost)
    return dump


class _TableReader:
    """The table's sections (GPUs, MIG devices, processes) line by line; a GPU is two or three rows."""

    def __init__(self, dump: c.SmiDump) -> None:
        self.dump = dump
        self.section = "gpus"
        self.cur: GpuFacts | None = None
        self.row_in_block = 0
        self.has_mig_col = False
        self.readings_seen: set[int] = set()  # (ids of) the GPUs whose second row (the readings) was read

    def feed(self, line: str) -> None:
        h = _HEADER_RE.search(line)
        if h:
            self.dump.driver_version = h.group("drv") if h.group("drv") != "N/A" else None
            cuda = h.group("cuda")
            self.dump.cuda_version = cuda if cuda and cuda != "N/A" else None
            self.section = "gpus"
            return
        s = line.strip()
        if not s:
            return
        if s.startswith("+") or set(s) <= set("|-=+"):
            self.row_in_block = 0
            self.cur = None if s.startswith("+") else self.cur
            return
        if "MIG devices:" in s:
            self.section = "mig"
            return
        if "Processes:" in s:
            self.section = "procs"
            return
        cells = _cells(line)
        if not cells:
            return
        if self.section == "gpus":
            self._gpu_row(line, cells)
        elif self.section == "mig":
            if len(cells) >= 2:
                m = _MIG_RE.match(cells[0])
                if m:
                    g = self._by_index(int(m.group("gpu")))
                    if g is not None:
                        g.mig_mode_current = True
        elif self.section == "procs" and len(cells) == 1:
            self._process_row(cells[0])

    def _by_index(self, index: int) -> GpuFacts | None:
        return next((x for x in self.dump.gpus if x.index == index), None)

    def _gpu_row(self, line: str, cells: list[str]) -> None:
        if "MIG M." in line:
            self.has_mig_col = True
        if len(cells) < 3:
            return
        bus = _BUS_RE.search(cells[1])
        r1 = _ROW1_RE.match(cells[0])
        cur = self.cur
        if bus and r1:
            self.cur = _row1(r1, normalize_bus_id(bus.group("bus")), cells)
            self.dump.gpus.append(self.cur)
            self.row_in_block = 1
        elif cur is not None and self.row_in_block == 1:
            _row2(cur, cells)
            self.readings_seen.add(id(cur))
            self.row_in_block = 2
        elif cur is not None and self.row_in_block == 2 and (self.has_mig_col or cells[2].strip()):
            cur.mig_mode_current = c.yes_no(cells[2].strip())
            self.row_in_block = 3

    def _process_row(self, cell: str) -> None:
        m = _PROC_RE.match(cell)
        if not m:
            return
        g = self._by_index(int(m.group("gpu")))
        if g is None:
            return
        t = m.group("type")
        pname = m.group("name").strip() or None
        g.processes.append(
            GpuProcess(  # WSL/WDDM print "Insufficient Permissions" for a name
                pid=int(m.group("pid")),
                name=None if c.error_reason(pname) else pname,
                used_memory_bytes=c.mib_bytes(m.group("mem")),
                kind="graphics" if t == "G" else "compute",
            )
        )


def _row1(r1: re.Match[str], bus: str, cells: list[str]) -> GpuFacts:
    """The first row of a GPU: index, name, persistence mode, bus id, volatile uncorrected ECC."""
    cur = GpuFacts(index=int(r1.group("idx")), pci_bus_id=bus)
    name = r1.group("name").strip()
    cur.name = name if name and not _is_err(name) else None
    pm = r1.group("pm")
    if pm in ("On", "Off"):
        cur.persistence_mode = pm == "On"
    ecc = cells[2].strip()
    cur.ecc_volatile_uncorrected = c.integer(ecc)
    if ecc == "Off":
        cur.ecc_mode_current = False
    elif cur.ecc_volatile_uncorrected is not None:
        cur.ecc_mode_current = True
    c.note_unreadable(cur, "ecc_volatile_uncorrected", ecc)
    if _is_err(name) or _is_err(pm):
        cur.lost, cur.lost_reason = True, "nvidia-smi printed ERR! for the GPU's identity"
    return cur


def _row2(g: GpuFacts, cells: list[str]) -> None:
    m = _ROW2_RE.match(cells[0])
    errs = 0
    if m:
        fan, temp, perf, pwr, cap = (m.group(k) for k in ("fan", "temp", "perf", "pwr", "cap"))
        g.fan_percent = c.num(fan)
        g.temperature_c = c.num(temp)
        g.performance_state = perf if perf and perf.startswith("P") else None
        g.power_draw_w = c.num(pwr)
        g.power_limit_w = c.num(cap)
        for name, v in (
            ("fan_percent", fan),
            ("temperature_c", temp),
            ("performance_state", perf),
            ("power_draw_w", pwr),
            ("power_limit_w", cap),
        ):
            if _is_err(v):
                g.unreadable[name] = "ERR!"
                errs += 1
    mem = _MEM_RE.search(cells[1])
    if mem:
        g.memory_used_bytes = c.mib_bytes(mem.group("used"))
        g.memory_total_bytes = c.mib_bytes(mem.group("total"))
        if _is_err(mem.group("used")):
            g.unreadable["memory_used_bytes"] = "ERR!"
            errs += 1
    if len(cells) > 2:
        parts = cells[2].split()
        if parts:
            g.utilization_gpu_pct = c.num(parts[0])
            if _is_err(parts[0]):
                g.unreadable["utilization_gpu_pct"] = "ERR!"
                errs += 1
        if len(parts) > 1 and not _is_err(parts[-1]):
            g.compute_mode = parts[-1]
    if errs >= 3 or ("temperature_c" in g.unreadable and "utilization_gpu_pct" in g.unreadable):
        g.lost = True
        g.lost_reason = "nvidia-smi printed ERR! for most of the GPU's readings (GPU not responding)"
