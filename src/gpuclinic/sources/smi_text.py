"""Parser for ``nvidia-smi -q`` text output, every driver era (3xx .. 58x).

The format is an indentation tree of ``Key : value`` lines.  Keys were renamed over the years
("Clocks Throttle Reasons" -> "Clocks Event Reasons", "Power Readings" -> "GPU Power Readings",
"Power Draw" -> "Average/Instantaneous Power Draw", "Power Limit" -> "Current Power Limit", ECC
"Single/Double Bit" -> "SRAM/DRAM (Un)correctable"), so lookups take every known spelling.
The parser is relative to the indentation of each ``GPU <bus id>`` line, which keeps it working on
dumps pasted with a prefix (bug reports, issue comments) and never raises on arbitrary text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from gpuclinic import lazyre
from gpuclinic.facts.gpu import GpuFacts, GpuProcess
from gpuclinic.facts.snapshot import normalize_bus_id
from gpuclinic.knowledge import gpu_fields
from gpuclinic.record import field, record
from gpuclinic.sources import smi_common as c
from gpuclinic.sources import sniffgates

MARKER = "==============NVSMI LOG=============="
MAX_LINE = 4096  # longer lines are not nvidia-smi output; skip them instead of regex-scanning megabytes

_KV_RE = lazyre.compile(r"^(?P<indent>[ \t]*)(?P<key>[^:\n]*?[^:\s])[ \t]*:(?:[ \t]+(?P<value>.*?))?[ \t]*$")
_KEY_RE = lazyre.compile(r"^(?P<indent>[ \t]*)(?P<key>[A-Za-z][^:\n]*?)[ \t]*$")
_GPU_RE = lazyre.compile(
    r"^(?P<indent>[ \t]*)GPU (?P<bus>[0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2}\.[0-7])[ \t]*$"
)


@record
class Node:
    """One ``key : value`` line of ``nvidia-smi -q`` text, with the lines indented under it."""

    key: str
    value: str | None = None
    children: list[Node] = field(default_factory=list)

    def get(self, *names: str) -> Node | None:
        """First child whose key matches one of ``names`` (case/space-insensitive), in ``names`` order."""
        for n in names:
            k = _norm(n)
            for ch in self.children:
                if _norm(ch.key) == k:
                    return ch
        return None

    def val(self, *path: str | tuple[str, ...]) -> str | None:
        """Value at a path; each step may be a tuple of alternative spellings."""
        node: Node | None = self
        for step in path:
            if node is None:
                return None
            node = node.get(*(step if isinstance(step, tuple) else (step,)))
        return node.value if node is not None else None

    def walk(self) -> Iterator[Node]:
        for ch in self.children:
            yield ch
            yield from ch.walk()


def _norm(k: str) -> str:
    return " ".join(k.lower().split())


def _indent(s: str) -> int:
    return len(s.expandtabs(4))


# Keys that only nvidia-smi -q prints; two of them make a paste without a "GPU <bus id>" line recognisable.
_SIGNATURE_RE = lazyre.compile(
    r"^[ \t]+(" + "|".join(re.escape(f) for f in sniffgates.SMI_TEXT_FIELDS) + r")[ \t]*:", re.M
)


# the clock event (throttle) reasons section on its own, as grepped or quoted: its title, then a reason row
_REASONS_RE = lazyre.compile(
    r"^[ \t]*Clocks (?:Event|Throttle) Reasons?[ \t]*\r?\n[ \t]+(?:Idle|Applications Clocks Setting|"
    r"SW Power Cap|HW Slowdown|SW Thermal Slowdown|HW Thermal Slowdown|HW Power Brake Slowdown|Sync Boost|"
    r"Display Clock Setting)[ \t]*:",
    re.M,
)


def looks_like(sample: str) -> bool:
    """True for ``nvidia-smi -q`` text: the NVSMI LOG banner, a GPU block, or a paste of its sections."""
    if MARKER in sample:
        return True
    if "GPU " in sample and re.search(  # the regex needs the literal
        r"^[ \t]*GPU [0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7][ \t]*\r?\n[ \t]+[A-Z][A-Za-z .]+[ "
        r"\t]*(:|\r?\n)",
        sample,
        re.M,
    ):
        return True
    head = sample[:65536]
    if not (head.startswith((" ", "\t")) or "\n " in head or "\n\t" in head):
        return False  # _SIGNATURE_RE matches only an indented line
    if "Reasons" in head and _REASONS_RE.search(head):  # `nvidia-smi -q | grep -A8 'Clocks Throttle'`
        return True
    return len(_signatures(head)) >= 2


def _signatures(head: str) -> set[str]:
    """``{m.group(1) for m in _SIGNATURE_RE.finditer(head)}``, up to two: the pattern is tried at the start
    of each indented line only (where its ``^[ \t]+`` can match; a match stays on its line), found with
    ``find``, not at every character of a prose sample."""
    found: set[str] = set()
    starts = [0] if head.startswith((" ", "\t")) else []
    for gap in ("\n ", "\n\t"):
        i = head.find(gap)
        while i >= 0:
            starts.append(i + 1)
            i = head.find(gap, i + 1)
    for i in starts:
        m = _SIGNATURE_RE.match(head, i)
        if m:
            found.add(m.group(1))
            if len(found) >= 2:
                break
    return found


def parse(text: str | Iterable[str]) -> c.SmiDump:
    """Parse one ``nvidia-smi -q`` output (text or lines).  Unknown lines are ignored."""
    lines = text.splitlines() if isinstance(text, str) else [ln.rstrip("\r\n") for ln in text]
    dump = c.SmiDump(kind="smi_text")
    b = _TreeBuilder(dump)
    if not any(_GPU_RE.match(ln) for ln in lines if len(ln) <= MAX_LINE) and looks_like(
        "\n".join(lines[:2000])
    ):
        # a paste of sections without the "GPU <bus id>" line (e.g. `nvidia-smi -q | grep -A9 Temperature`):
        # read it as one GPU whose bus id is unknown
        b.start_orphan()
    for raw in lines:
        if len(raw) > MAX_LINE or not raw.strip():
            continue
        b.feed(raw.rstrip())
    for i, (bus, root) in enumerate(b.roots):
        if root is b.orphan and not root.children:
            continue
        dump.gpus.append(_gpu_from_tree(i, bus or None, root))
    errors, lost = c.scan_error_lines(lines if len(lines) < 200_000 else lines[:200_000])
    dump.errors = errors
    c.mark_lost(dump.gpus, lost)
    return dump


class _TreeBuilder:
    """Indented ``key : value`` lines -> one tree per "GPU <bus id>" block; header lines -> the dump."""

    def __init__(self, dump: c.SmiDump) -> None:
        self.dump = dump
        self.roots: list[tuple[str, Node]] = []  # (bus id, tree)
        self.stack: list[tuple[int, Node]] = []
        self.gpu_indent = -1
        self.orphan: Node | None = None

    def start_orphan(self) -> None:
        self.orphan = Node("GPU", None)
        self.roots.append(("", self.orphan))
        self.stack = [(-1, self.orphan)]

    def feed(self, line: str) -> None:
        g = _GPU_RE.match(line)
        if g:
            root = Node("GPU", g.group("bus"))
            self.roots.append((normalize_bus_id(g.group("bus")), root))
            self.gpu_indent = _indent(g.group("indent"))
            self.stack = [(self.gpu_indent, root)]
            return
        kv = _key_value(line)
        if kv is None:
            return
        ind, key, value = kv
        if self.orphan is not None and ind == 0 and _norm(key) in _HEADER_KEYS:
            pass  # header line inside a section paste: handled below, tree untouched
        elif self.stack and ind > self.gpu_indent:
            stack = self.stack
            while len(stack) > 1 and stack[-1][0] >= ind:
                stack.pop()
            node = Node(key, value)
            stack[-1][1].children.append(node)
            stack.append((ind, node))
            return
        # top-level (header) lines, outside any GPU block
        if self.orphan is None:
            self.stack = []
            self.gpu_indent = -1
        _header(self.dump, _norm(key), value)


def _key_value(line: str) -> tuple[int, str, str | None] | None:
    """(indent, key, value) of a ``key : value`` or bare ``key`` line; None for anything else."""
    m = _KV_RE.match(line)
    if m:
        return _indent(m.group("indent")), m.group("key").strip(), m.group("value")
    k = _KEY_RE.match(line)
    if not k:
        return None
    return _indent(k.group("indent")), k.group("key").strip(), None


def _header(dump: c.SmiDump, nk: str, value: str | None) -> None:
    # 610+ drivers note "[Deprecated; ... Use KMD Version instead]" after the version and add "KMD Version" /
    # "CUDA UMD Version" lines with the same numbers: the version is the value's first word either way
    if nk in ("driver version", "kmd version") and value:
        dump.driver_version = c.clean(value.split(" [", 1)[0])
    elif nk in ("cuda version", "cuda driver version", "cuda umd version") and value:
        cuda = value.split(" [", 1)[0]
        dump.cuda_version = c.clean(cuda) if cuda.strip().lower() != "not found" else None
    elif nk == "timestamp" and value:
        dump.timestamp = value.strip()
    elif nk == "attached gpus" and value:
        dump.attached_gpus = c.integer(value)


_HEADER_KEYS = {
    "driver version", "kmd version", "cuda version", "cuda driver version", "cuda umd version", "timestamp",
    "attached gpus",
}


_SCHEMA_ROWS = tuple(r for r in gpu_fields.fields() if r.text_reader == "schema")


def _gpu_from_tree(index: int, bus: str | None, t: Node) -> GpuFacts:
    g = GpuFacts(index=index, pci_bus_id=bus)
    # one row per fact, straight from knowledge/data/gpu_fields.json: the first of its text paths (newest
    # spelling first, older drivers' after) that holds a readable value; an error printed in its place
    # ("[Unknown Error]", "[GPU requires reset]") is kept as the reason it is unreadable
    for row in _SCHEMA_ROWS:
        parse = c.SCHEMA_PARSE[row.parse]
        raws = [v for v in (t.val(*p.split("/")) for p in row.smi_text) if v is not None]
        value = next((x for x in map(parse, raws) if x is not None), None)
        if row.parse == "str" and value is not None and c.failed_answer(c.error_reason(value)):
            value = None  # "Product Name : Unknown Error" is no name: NVML failed to answer
        setattr(g, row.fact, value)
        if value is None and raws:  # (only an error printed in its place is noted)
            c.note_unreadable(g, row.fact, raws[0])
    # what one row cannot say: derived values, counts summed over an era's layout, lists, reason flags
    _pci(g, t)
    _clock_reasons(g, t)
    _ecc(g, t)
    _retired_and_remapped(g, t)
    _temperature_limits(g, t)
    _recovery_action(g, t)
    procs = t.get("Processes")
    if procs is not None:
        g.processes = _processes(procs)
    for n in t.children:  # whole-GPU failures printed in place of a section value
        why = c.error_reason(n.value)
        if why and ("gpu is lost" in why.lower()):
            g.lost, g.lost_reason = True, f"nvidia-smi: {why}"
    return g


def _pci(g: GpuFacts, t: Node) -> None:
    pci = t.get("PCI")
    if pci is None:
        return
    bid = c.clean(pci.val("Bus Id"))
    if bid:
        g.pci_bus_id = normalize_bus_id(bid)
    host_max = c.integer(pci.val("GPU Link Info", "PCIe Generation", "Host Max"))
    if g.pcie_gen_max is None and g.pcie_gen_gpu_max is not None:
        g.pcie_gen_max = min(g.pcie_gen_gpu_max, host_max) if host_max else g.pcie_gen_gpu_max
    if g.pcie_gen_gpu_max is None:
        g.pcie_gen_gpu_max = g.pcie_gen_max


def _clock_reasons(g: GpuFacts, t: Node) -> None:
    """Active clock event (throttle) reasons and their counters, under any driver's section name."""
    reasons = t.get("Clocks Event Reasons", "Clocks Throttle Reasons", "Clocks Throttle Reason")
    if reasons is not None:
        active: dict[str, bool] = {}
        for n in reasons.walk():
            name = c.reason_name(n.key)
            on = c.yes_no(n.value)
            if name and on is not None:
                active[name] = on
        c.set_reasons(g, active)
    counters = t.get("Clocks Event Reasons Counters", "Clocks Throttle Reasons Counters")
    if counters is not None:
        for n in counters.walk():
            name = c.COUNTER_NAMES.get(c.reason_name(n.key) or "")
            ns = c.microseconds_ns(n.value)
            if name and ns is not None:
                g.violation_ns[name] = ns


def _ecc(g: GpuFacts, t: Node) -> None:
    ecc = t.get("ECC Errors")
    if ecc is None:
        return
    for scope in ("Volatile", "Aggregate"):
        node = ecc.get(scope)
        if node is None:
            continue
        corr, unc = _ecc_counts(node)
        if scope == "Volatile":
            g.ecc_volatile_corrected, g.ecc_volatile_uncorrected = corr, unc
        else:
            g.ecc_aggregate_corrected, g.ecc_aggregate_uncorrected = corr, unc
        for n in node.children:
            c.note_unreadable(g, f"ecc_{scope.lower()}", n.value)


def _retired_and_remapped(g: GpuFacts, t: Node) -> None:
    rp = t.get("Retired Pages", "Page Retirement")
    if rp is not None:
        for n in rp.children:
            if _norm(n.key).startswith("pending"):
                v = c.yes_no(n.value)
                if v is not None:
                    g.retired_pages_pending = bool(g.retired_pages_pending) or v
    rr = t.get("Remapped Rows")
    if rr is not None:
        c.note_unreadable(g, "remapped_rows", rr.value)


def _temperature_limits(g: GpuFacts, t: Node) -> None:
    temp = t.get("Temperature")
    if temp is not None:
        c.apply_tlimit(
            g,
            c.num(temp.val("GPU T.Limit Temp")),
            c.num(temp.val("GPU Shutdown T.Limit Temp")),
            c.num(temp.val("GPU Slowdown T.Limit Temp")),
            c.num(temp.val("GPU Max Operating T.Limit Temp")),
        )


def _recovery_action(g: GpuFacts, t: Node) -> None:
    rs = t.get("GPU Reset Status")
    if rs is not None:
        if c.yes_no(rs.val("Drain and Reset Recommended")):
            g.recovery_action = "drain_and_reset"
        elif c.yes_no(rs.val("Reset Required")):
            g.recovery_action = "gpu_reset"
    ra = c.clean(t.val("GPU Recovery Action"))
    if ra and ra.lower() != "none":
        g.recovery_action = "_".join(ra.lower().split())


def _ecc_counts(node: Node) -> tuple[int | None, int | None]:
    """(corrected, uncorrected) for one ECC scope in any era's layout."""
    sb = node.get("Single Bit")
    db = node.get("Double Bit")
    if sb is not None or db is not None:
        return (_total(sb), _total(db))
    corr: int | None = None
    unc: int | None = None
    for n in node.children:
        k = _norm(n.key)
        if "threshold" in k or n.children and n.value is None:
            continue
        v = c.integer(n.value)
        if v is None:
            continue
        if "uncorrectable" in k:
            unc = (unc or 0) + v
        elif "correctable" in k:
            corr = (corr or 0) + v
    return corr, unc


def _total(node: Node | None) -> int | None:
    if node is None:
        return None
    tot = c.integer(node.val("Total"))
    if tot is not None:
        return tot
    vals = [c.integer(ch.value) for ch in node.children]
    nums = [v for v in vals if v is not None]
    return sum(nums) if nums else None


def _processes(node: Node) -> list[GpuProcess]:
    out: list[GpuProcess] = []
    cur: dict[str, str | None] = {}

    def flush() -> None:
        pid = c.integer(cur.get("process id"))
        if pid is not None:
            kind = (cur.get("type") or "C").strip().upper()
            name = c.clean(cur.get("name"))
            out.append(
                GpuProcess(
                    pid=pid,
                    name=None if c.error_reason(name) else name,
                    used_memory_bytes=c.mib_bytes(cur.get("used gpu memory")),
                    kind="graphics" if kind == "G" else "compute",
                )
            )

    for n in node.walk():
        k = _norm(n.key)
        if k in ("process id", "gpu instance id") and "process id" in cur:
            flush()
            cur = {}
        cur[k] = n.value
    flush()
    return out
