"""The readers of the segmenting reader (``segments.py``) for the lines it classified: kernel-log lines,
nvidia-smi error statements and ``-L`` listings, DCGM output and dcgm-exporter metrics, driver versions in
JSON inventories."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterable

from gpuclinic import lazyre
from gpuclinic.facts.evidence import InputRecord, Segment
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.record import record
from gpuclinic.sources import (
    dcgm_discovery,
    dcgm_dmon,
    dcgm_json,
    dcgm_metrics,
    net_paste,
    smi_dmon,
    smi_exporter_metrics,
    smi_mig,
)
from gpuclinic.sources.dcgm_json import is_dcgm_json as is_dcgm_json
from gpuclinic.sources.kernellog import parse_numbered
from gpuclinic.sources.merge import apply_dump, merge_gpu
from gpuclinic.sources.smi_common import SmiDump, mark_lost, scan_error_lines


@record
class Reading:
    """One text input under way: what every line reader below reads (its lines, their classes and the
    special ones, the year its dates lack) and updates (the snapshot, the input's record, the 1-based lines
    some reader used)."""

    snap: Snapshot
    rec: InputRecord
    lines: list[str]
    classes: list[str]
    special: list[int]
    origin: str
    claimed: set[int]
    year: int | None = None


DRIVER_KEY = "river"  # the JSON driver-version keys all hold it
DMON_KEYS = smi_dmon.DMON_KEYS
DCGM_DMON_KEY = dcgm_dmon.DMON_KEY
MIG_KEYS = smi_mig.MIG_KEYS
SMI_L_KEY = "UUID: GPU-"
# literals a line of every InfiniBand port listing (sources/ib_ports.py) / nccl-tests output (nccl_tests.py)
# holds; those readers load only when a line has one
NET_KEYS = net_paste.KEYS  # pasted ping/mtr/iperf3/meters (a module of constants and lazy regexes)
IB_KEYS = ("CA type:", "Infiniband device '", "hca_id:", "physical_state ")
NCCL_TESTS_KEYS = ("Avg bus bandwidth", "Out of bounds values", "busbw")
_NVML_LIB = lazyre.compile(r"NVML library version:\s*(\d+\.\d+(?:\.\d+)?)")


def read_kernel(r: Reading) -> None:
    """Kernel-log lines, wherever they are, through one stateful parser (multi-line messages)."""
    snap, rec, lines, classes = r.snap, r.rec, r.lines, r.classes
    special, origin, year, claimed = r.special, r.origin, r.year, r.claimed
    ks = [k for k in special if classes[k] in ("kernel_log", "journal_export")]
    kernel = [(k + 1, lines[k]) for k in ks if classes[k] == "kernel_log" or lines[k].startswith("MESSAGE=")]
    if not kernel:
        return
    snap.kernel_events.extend(
        parse_numbered(
            ((i, ln[8:] if ln.startswith("MESSAGE=") else ln) for i, ln in kernel), origin, year=year
        )
    )
    snap.kernel_log_read = True
    if origin not in snap.kernel_log_sources:
        snap.kernel_log_sources.append(origin)
    claimed.update(k + 1 for k in ks)
    reader(rec, rec.segments, ("kernel_log", "journal_export"), "kernellog")


def read_smi_errors(r: Reading) -> None:
    """nvidia-smi's error statements."""
    snap, rec, lines = r.snap, r.rec, r.lines
    classes, special, origin, claimed = r.classes, r.special, r.origin, r.claimed
    errs = [k for k in special if classes[k] == "smi_error"]
    if errs:
        _smi_errors(snap, [lines[k] for k in errs], origin)
        claimed.update(k + 1 for k in errs)
        reader(rec, rec.segments, ("smi_error",), "nvidia-smi errors")


def read_dcgm(r: Reading) -> None:
    """DCGM output (dcgmi diag / health tables): the driver version and GPUs it names; dmon's Xid column."""
    snap, rec, lines, origin, claimed = r.snap, r.rec, r.lines, r.origin, r.claimed
    for s_ in rec.segments:
        if s_.kind == "dcgm" and s_.first is not None and s_.last is not None:
            run = lines[s_.first - 1 : s_.last]
            xids = dcgm_dmon.xid_events(run, origin, s_.first)  # dmon XIDER
            snap.kernel_events.extend(xids)
            js = 0  # `dcgmi diag -j`: the JSON's last line (it runs on past the segment)
            if is_dcgm_json("\n".join(run)):
                js = dcgm_json.read(snap, lines, origin, s_.first)
            last = max(s_.last, js)
            if js or _dcgm(snap, run, origin) or xids:
                s_.readers.append("dcgm")
                claimed.update(range(s_.first, last + 1))
                if "dcgm" not in rec.readers:
                    rec.readers.append("dcgm")


def read_metrics(r: Reading) -> None:
    """dcgm-exporter ``/metrics`` samples (GPU facts by the field schema's DCGM names) and
    nvidia_gpu_exporter's ``nvidia_smi_*`` samples (by its ``--query-gpu`` names)."""
    snap, rec, lines = r.snap, r.rec, r.lines
    classes, special, origin, claimed = r.classes, r.special, r.origin, r.claimed
    # ("# HELP"/"# TYPE" lines look like a root prompt to the line classifier)
    ks = [k for k in special if classes[k] == "metrics" or (classes[k] == "prompt" and "# " in lines[k])]
    if not ks:
        return
    for parse, name in (
        (dcgm_metrics.parse, "dcgm-exporter metrics"),
        (smi_exporter_metrics.parse, "nvidia_gpu_exporter metrics"),
    ):
        dump, used = parse((k + 1, lines[k]) for k in ks if k + 1 not in claimed)
        if not used:
            continue
        if dump.gpus or dump.driver_version:
            apply_dump(snap, dump, origin)
        claimed.update(used)
        reader(rec, rec.segments, ("metrics",), name)


def read_json_driver(r: Reading, where: Iterable[int] | None = None) -> None:
    """A driver version in JSON inventories (health agents, cluster managers): "driver_version": "580.x"."""
    snap, lines, claimed = r.snap, r.lines, r.claimed
    if snap.driver_version is not None:
        return
    for k in range(len(lines)) if where is None else where:  # ``where``: lines that may hold the key
        m = _JSON_DRIVER.search(lines[k]) if DRIVER_KEY in lines[k] else None
        if m:
            snap.driver_version = m.group(1)
            claimed.add(k + 1)
            return


# literals the key line of each host-stats format holds (a big input's reader visits only lines holding one)
HOST_STATS_KEYS = ("Cpu(s)", "swpd", "%steal", "%iowait", "buff/cache", "iB Mem")


def read_host_stats(r: Reading, where: Iterable[int] | None = None) -> None:
    """``top``/``vmstat``/``mpstat``/``iostat`` pastes: CPU steal, I/O wait and swap as host facts."""
    snap, rec, lines, claimed = r.snap, r.rec, r.lines, r.claimed
    from gpuclinic.sources import host_stats

    facts, used = host_stats.read(lines, where)
    if facts is None:
        return
    if snap.host is None:
        snap.host = facts
    else:  # a second paste (or live facts): the pasted figures
        snap.host.cpu_pct = facts.cpu_pct or snap.host.cpu_pct
        if facts.swap_in_per_s is not None:
            snap.host.swap_in_per_s, snap.host.swap_out_per_s = facts.swap_in_per_s, facts.swap_out_per_s
        if facts.mem_total_bytes:
            snap.host.mem_total_bytes = facts.mem_total_bytes
            snap.host.mem_available_bytes = facts.mem_available_bytes
        snap.host.extra.update(facts.extra)
    claimed.update(used)
    rec.readers.append(f"host stats ({facts.extra['read_from']})")


K8S_NODE_KEYS = ("nvidia.com/gpu", "nvidia.com/mig-", "nvidia.com/mig.strategy")  # (k8s_node_text keys)


def read_k8s_nodes(r: Reading, where: Iterable[int] | None = None) -> None:
    """``kubectl describe node`` / ``get node -o yaml|json`` pastes: ``nvidia.com/gpu`` capacity and
    allocatable, judged by the ``k8s evidence`` rules (``k8s/evidence.py``) into signals of this input."""
    snap, rec, lines, origin, claimed = r.snap, r.rec, r.lines, r.origin, r.claimed
    from gpuclinic.sources import k8s_node_text

    nodes, used = k8s_node_text.read(lines, where)
    if not nodes:
        return
    from gpuclinic.facts.evidence import Signal
    from gpuclinic.k8s.evidence import node_findings

    for node, lineno in nodes:
        for f in node_findings(node, None, None):
            snap.signals.append(
                Signal(
                    code=f.code,
                    severity=f.severity.name.lower(),
                    family=f.family.value,
                    title=f.title,
                    line=f.evidence[0] if f.evidence else lines[lineno - 1].strip(),
                    input=origin,
                    lineno=lineno,
                    source=f.source or "",
                    data={"signature": "k8s_node_status"},
                )
            )
    claimed.update(used)
    rec.readers.append(f"kubernetes node status ({len(nodes)} node{'s' if len(nodes) > 1 else ''})")


SLURM_NODE_KEY = "NodeName="  # (slurm_node_text.KEY)


def read_slurm_nodes(r: Reading, where: Iterable[int] | None = None) -> None:
    """``scontrol show node`` records: read (state, reason) by the health check's own parser; the reasons
    that name a fault are evidence signatures of their lines."""
    rec, lines, claimed = r.rec, r.lines, r.claimed
    from gpuclinic.sources import slurm_node_text

    nodes, used = slurm_node_text.read(lines, where)
    if not nodes:
        return
    claimed.update(used)
    shown = ", ".join(f"{n.name} {n.state}" for n in nodes[:3]) + (", ..." if len(nodes) > 3 else "")
    rec.readers.append(f"slurm node state ({shown})")


def read_net_paste(r: Reading, where: Iterable[int] | None = None) -> None:
    """``ping``/``mtr``/``iperf3`` summaries and transfer meters: the path's loss, RTT and rate as network
    facts (``NetworkFacts.extra["pasted"]``), judged by the network checks with ``gpuclinic net``'s
    thresholds."""
    snap, rec, lines, claimed = r.snap, r.rec, r.lines, r.claimed
    figs, used = net_paste.read(lines, where)
    if not figs:
        return
    if snap.network is None:
        from gpuclinic.facts.network import NetworkFacts

        snap.network = NetworkFacts()
    snap.network.extra.setdefault("pasted", []).extend(figs)
    claimed.update(used)
    rec.readers.append("network figures (" + ", ".join(sorted({f["tool"] for f in figs})) + ")")


def read_smi_list(r: Reading, where: Iterable[int] | None = None) -> None:
    """``nvidia-smi -L`` (GPU 0: NAME (UUID: GPU-...)): the GPUs, when no other reader named them (the
    GPUs nvidia-smi could not open, known only by the bus id of its error line, name none: ``-L`` prints
    that line in the lost GPU's place and lists the others, NordicHPC/sonar#72)."""
    snap, rec, lines, classes, claimed = r.snap, r.rec, r.lines, r.classes, r.claimed
    if any(not (g.lost and g.uuid is None and g.name is None) for g in snap.gpus):
        return
    listed = [
        (k + 1, m)
        for k in (range(len(lines)) if where is None else where)  # ``where``: lines that may hold the key
        if classes[k] in ("other", "blank") and SMI_L_KEY in lines[k] and (m := _SMI_L.match(lines[k]))
    ]
    if listed:
        from gpuclinic.facts.gpu import GpuFacts

        for _, m in listed:
            g = GpuFacts(index=int(m.group(1)), name=m.group(2).strip(), uuid=m.group(3))
            merge_gpu(snap, g, alone=False)
        claimed.update(i for i, _ in listed)
        rec.readers.append("nvidia-smi -L")


def read_smi_dmon(r: Reading, where: Iterable[int] | None = None) -> None:
    """``nvidia-smi dmon`` samples: from each header line on, while the lines are its samples."""
    snap, rec, lines, origin, claimed = r.snap, r.rec, r.lines, r.origin, r.claimed
    heads = [
        k
        for k in (range(len(lines)) if where is None else where)  # big input: lines with a DMON_KEYS literal
        if "gpu" in lines[k] and lines[k].lstrip().startswith("#") and smi_dmon.header_columns(lines[k])
    ]
    numbered = _blocks(lines, heads, _dmon_line)
    if not numbered:
        return
    dump, used = smi_dmon.parse(numbered)
    if not dump.gpus:
        return
    apply_dump(snap, dump, origin)
    claimed.update(used)
    _mark(rec, used, "nvidia-smi dmon")


def _keyed(lines: list[str], where: Iterable[int] | None, keys: tuple[str, ...]) -> list[int] | None:
    """The 0-based lines holding one of ``keys`` (of ``where`` on a big input); None when none does."""
    cand = range(len(lines)) if where is None else where
    got = [k for k in cand if any(key in lines[k] for key in keys)]
    return got or None


def read_nccl_tests(r: Reading, where: Iterable[int] | None = None) -> None:
    """nccl-tests benchmark tables and summaries (sources/nccl_tests.py)."""
    snap, rec, lines, origin, claimed = r.snap, r.rec, r.lines, r.origin, r.claimed
    _read_keyed(snap, rec, lines, origin, where, claimed, NCCL_TESTS_KEYS, "nccl_tests", "nccl-tests")


def read_ib_ports(r: Reading, where: Iterable[int] | None = None) -> None:
    """``ibstat``/``ibstatus``/``ibv_devinfo``/``rdma link`` port listings (sources/ib_ports.py)."""
    snap, rec, lines, origin, claimed = r.snap, r.rec, r.lines, r.origin, r.claimed
    _read_keyed(snap, rec, lines, origin, where, claimed, IB_KEYS, "ib_ports", "InfiniBand ports")


def _read_keyed(
    snap: Snapshot,
    rec: InputRecord,
    lines: list[str],
    origin: str,
    where: Iterable[int] | None,
    claimed: set[int],
    keys: tuple[str, ...],
    module: str,
    name: str,
) -> None:
    """A reader module with ``parse(lines, marks) -> (read, used lines)`` and ``apply(snap, read, origin)``,
    imported only when a line holds one of its ``keys`` (explain's start-up loads none of them)."""
    marks = _keyed(lines, where, keys)
    if marks is None:
        return
    mod = importlib.import_module(f"gpuclinic.sources.{module}")
    read, used = mod.parse(lines, marks)
    if not read or not used:
        return
    mod.apply(snap, read, origin)
    claimed.update(used)
    _mark(rec, used, name)


def read_smi_mig(r: Reading, where: Iterable[int] | None = None) -> None:
    """``nvidia-smi mig -lgi`` / ``-lci`` / ``-lgip`` tables: from each banner on, while the table goes on."""
    snap, rec, lines, origin, claimed = r.snap, r.rec, r.lines, r.origin, r.claimed
    heads = [
        k
        for k in (range(len(lines)) if where is None else where)  # big input: lines with a MIG_KEYS literal
        if "instance" in lines[k] and smi_mig.banner(lines[k])
    ]
    numbered = _blocks(lines, heads, smi_mig.table_line)
    if not numbered:
        return
    dump, used = smi_mig.parse(numbered)
    if not dump.gpus:
        return
    apply_dump(snap, dump, origin)
    claimed.update(used)
    _mark(rec, used, "nvidia-smi mig")


def _blocks(lines: list[str], heads: Iterable[int], goes_on: Callable[[str], bool]) -> list[tuple[int, str]]:
    """(1-based number, line) of each block: a header line (``heads``, 0-based, in order) and the lines after
    it while ``goes_on``; a header inside an earlier block is part of that block."""
    numbered: list[tuple[int, str]] = []
    end = -1
    for h in heads:
        if h <= end:
            continue
        k = h
        while k < len(lines) and (k == h or goes_on(lines[k])):
            numbered.append((k + 1, lines[k]))
            k += 1
        end = k - 1
    return numbered


def _mark(rec: InputRecord, used: list[int], name: str) -> None:
    """Name reader ``name`` on the segments holding the lines it used, and on the input."""
    first, last = min(used), max(used)
    for s_ in rec.segments:
        if s_.first is not None and s_.last is not None and s_.first <= last and s_.last >= first:
            if name not in s_.readers:
                s_.readers.append(name)
    if name not in rec.readers:
        rec.readers.append(name)


def read_dcgm_dmon(r: Reading, where: Iterable[int] | None = None) -> None:
    """``dcgmi dmon`` readings: from each ``#Entity`` header on, while the lines are its rows."""
    snap, rec, lines, origin, claimed = r.snap, r.rec, r.lines, r.origin, r.claimed
    heads = [h for h in (range(len(lines)) if where is None else where) if DCGM_DMON_KEY in lines[h]]
    numbered = _blocks(lines, heads, _dcgm_dmon_line)  # (big input: ``where``, lines holding the key)
    numbered = [(n, ln) for n, ln in numbered if n not in claimed]  # (a DCGM segment's XIDER was read)
    if not numbered:
        return
    used: list[int] = []
    xids = dcgm_dmon.xid_events([ln for _, ln in numbered], origin, numbered[0][0])
    if len({n for n, _ in numbered}) == numbered[-1][0] - numbered[0][0] + 1:  # line numbers in step
        snap.kernel_events.extend(xids)
        used.extend(e.lineno for e in xids if e.lineno is not None)
    dump, read = dcgm_dmon.readings(numbered)
    if dump.gpus:
        apply_dump(snap, dump, origin)
        used.extend(read)
    if used:
        claimed.update(used)
        _mark(rec, used, "dcgmi dmon")


def _dcgm_dmon_line(line: str) -> bool:
    """A line of a ``dcgmi dmon`` run: blank, a header, the units row or an entity row."""
    s = line.strip()
    return not s or s.startswith(("#Entity", "ID", "GPU ", "GPU-I ", "GPU-CI ", "CPU ", "SWITCH "))


def _dmon_line(line: str) -> bool:
    """A line that may belong to a dmon run: blank, a '#' header/units line or a row starting with a number
    (the GPU index, or the date/time of ``-o DT``)."""
    s = line.strip()
    return not s or s[0] == "#" or s[0].isdigit()


_SMI_L = lazyre.compile(r"^\s*GPU (\d{1,3}): (.+?) \(UUID: (GPU-[0-9a-fA-F-]{36})\)\s*$")
_JSON_DRIVER = lazyre.compile(
    r'"(?:driver_version|driverVersion|DriverVersion|nvidia_driver_version)"\s*:\s*"(\d{3}\.\d+(?:\.\d+)?)"'
)
_DCGM_DRIVER = lazyre.compile(r"^\|\s*Driver Version Detected\s*\|\s*(\d+\.\d+(?:\.\d+)?)\s*\|", re.M)
_DCGM_RESULT = lazyre.compile(r"^\|[^|]*\|\s*(?:Pass|Fail|Skip|Warn)\b", re.M)
_DCGM_IDS = lazyre.compile(r"^\|\s*GPU Device IDs Detected\s*\|\s*([0-9a-fA-F, ]+?)\s*\|", re.M)


def _dcgm(snap: Snapshot, run: list[str], origin: str) -> bool:
    """``dcgmi diag`` metadata: the driver version and one GPU per detected device id (when nothing else
    named the GPUs); the GPUs ``dcgmi discovery -l`` lists.  Xids in DCGM output are read by the fault
    signatures."""
    from gpuclinic.facts.gpu import GpuFacts

    text = "\n".join(run)
    got = False
    found, count = dcgm_discovery.parse(run)  # `dcgmi discovery -l`
    if found:
        dump = SmiDump(kind="dcgm", gpus=found, attached_gpus=count)
        apply_dump(snap, dump, origin)
        got = True
    m = _DCGM_DRIVER.search(text)
    if m:
        snap.driver_version = snap.driver_version or m.group(1)
        got = True
    m = _DCGM_IDS.search(text)
    if m:
        ids = [x.strip() for x in m.group(1).split(",") if x.strip()]
        if ids and not snap.gpus:
            snap.gpus.extend(GpuFacts(index=i, pci_device_id=f"0x{d.lower()}") for i, d in enumerate(ids))
        got = True
    # a result table without its metadata rows (a pasted excerpt): its Pass/Fail/Skip rows are the results
    # the signatures judge (dcgm.diag_fail), so the table is read
    return got or _DCGM_RESULT.search(text) is not None


def reader(rec: InputRecord, segs: list[Segment], kinds: tuple[str, ...], name: str) -> None:
    for s in segs:
        if s.kind in kinds and name not in s.readers:
            s.readers.append(name)
    if name not in rec.readers:
        rec.readers.append(name)


def _smi_errors(snap: Snapshot, lines: list[str], origin: str) -> None:
    errors, lost = scan_error_lines(lines)
    dump = SmiDump(kind="smi_table", errors=errors)
    mark_lost(dump.gpus, lost)
    apply_dump(snap, dump, origin)
    for ln in lines:
        m = _NVML_LIB.search(ln)
        if m and snap.software is not None and m.group(1) not in snap.software.user_lib_versions:
            snap.software.user_lib_versions.append(m.group(1))


def reader_keys() -> tuple[str, ...]:
    """The literals the line readers above look for (a big input's needle scan finds their lines): one list
    beside the readers, not a second one in the segmenting reader."""
    return (
        DRIVER_KEY,
        SMI_L_KEY,
        *HOST_STATS_KEYS,
        *K8S_NODE_KEYS,
        SLURM_NODE_KEY,
        *NET_KEYS,
        *DMON_KEYS,
        *MIG_KEYS,
        *IB_KEYS,
        *NCCL_TESTS_KEYS,
        DCGM_DMON_KEY,
    )
