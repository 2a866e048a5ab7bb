"""Host CPU and swap figures as people paste them: ``top``'s ``%Cpu(s)`` line, ``vmstat`` tables,
``mpstat`` and ``iostat`` (its ``avg-cpu`` block), memory from ``free``.

A slow or stalling training job on a VM is often CPU steal, I/O wait or swapping, and the user's evidence is
one of these pastes, not /proc.  The figures become the host facts the live source measures (``cpu_pct``
steal/iowait/user/system/idle, swap pages per second), so the host checks judge them against the same
thresholds (knowledge/data/host_thresholds.json).  Only the interval figures count: the first ``vmstat`` row
and the first ``iostat`` report are averages since boot and are left out when later ones follow.
``sar -u`` is read like ``mpstat`` (same layout).  ``HostFacts.extra["read_from"]`` names the tool the
figures came from (the checks' evidence says so).
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuclinic import lazyre
from gpuclinic.facts.host import HostFacts

_TOP = lazyre.compile(r"^\s*%?Cpu\(s\):\s*(?P<rest>.*\d.*)$")
_TOP_FIELD = lazyre.compile(r"(?P<v>\d+(?:[.,]\d+)?)\s*%?\s*(?P<k>us|sy|ni|id|wa|hi|si|st)\b")
_TOP_NAMES = {"us": "user", "sy": "system", "id": "idle", "wa": "iowait", "st": "steal"}
_VMSTAT_HEAD = lazyre.compile(r"^\s*r\s+b\s+swpd\s+free\s+(?P<rest>.*)$")
_VMSTAT_NAMES = {"us": "user", "sy": "system", "id": "idle", "wa": "iowait", "st": "steal"}
_PCT_NAMES = {
    "%user": "user",
    "%usr": "user",
    "%system": "system",
    "%sys": "system",
    "%iowait": "iowait",
    "%steal": "steal",
    "%idle": "idle",
}
_NUM = lazyre.compile(r"^-?\d+(?:[.,]\d+)?$")
PAGE_KIB = 4  # vmstat's si/so are KiB/s (its default unit); the swap threshold counts 4 KiB pages


def _num(tok: str) -> float | None:
    return float(tok.replace(",", ".")) if _NUM.match(tok) else None


def _top(lines: list[str], idx: Iterable[int]) -> tuple[dict[str, float], set[int]]:
    """The last ``%Cpu(s)`` line (``top -bn2``: the first is since boot)."""
    found: dict[str, float] = {}
    used: set[int] = set()
    for k in idx:
        m = _TOP.match(lines[k]) if "Cpu(s)" in lines[k] else None
        if m is None:
            continue
        vals = {
            _TOP_NAMES[f.group("k")]: float(f.group("v").replace(",", "."))
            for f in _TOP_FIELD.finditer(m.group("rest"))
            if f.group("k") in _TOP_NAMES
        }
        if "idle" in vals:
            found = vals
            used.add(k + 1)
    return found, used


_TOP_MEM = lazyre.compile(r"^\s*(?P<u>[KMGT])iB Mem\s*:\s*(?P<total>\d+(?:[.,]\d+)?) total\b")
_TOP_AVAIL = lazyre.compile(r"^\s*(?P<u>[KMGT])iB Swap\s*:.*?(?P<avail>\d+(?:[.,]\d+)?) avail Mem\b")


def _top_memory(lines: list[str], idx: Iterable[int]) -> tuple[dict[str, int], set[int]]:
    """procps-ng ``top``'s ``MiB Mem :  ... total`` and ``MiB Swap: ... avail Mem`` lines (units explicit)."""
    out: dict[str, int] = {}
    used: set[int] = set()
    for k in idx:
        m = _TOP_MEM.match(lines[k]) if "iB Mem" in lines[k] else None
        a = _TOP_AVAIL.match(lines[k + 1]) if m and k + 1 < len(lines) else None
        if m and a:
            unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
            out["mem_total"] = int(float(m.group("total").replace(",", ".")) * unit[m.group("u")])
            out["mem_available"] = int(float(a.group("avail").replace(",", ".")) * unit[a.group("u")])
            used.update((k + 1, k + 2))
    return out, used


def _vmstat(lines: list[str], idx: Iterable[int]) -> tuple[dict[str, float], set[int]]:
    """A ``vmstat`` table: the mean of its interval rows (``-t``/ExaWatcher timestamps are skipped)."""
    out: dict[str, float] = {}
    used: set[int] = set()
    for k in idx:
        m = _VMSTAT_HEAD.match(lines[k]) if "swpd" in lines[k] else None
        if m is None:
            continue
        cols = [c for c in lines[k].split() if c.islower()]  # (``vmstat -t`` ends with its time zone)
        rows: list[list[float]] = []
        n = k + 1
        while n < len(lines):
            toks = [v for v in (_num(t) for t in lines[n].split()) if v is not None]
            if len(toks) != len(cols):
                if lines[n].strip().startswith(("procs", "r ")) or "swpd" in lines[n]:
                    n += 1  # a repeated header (vmstat reprints it every screenful)
                    continue
                break
            rows.append(toks)
            used.add(n + 1)
            n += 1
        if not rows:
            continue
        used.add(k + 1)
        if k > 0 and "procs" in lines[k - 1]:
            used.add(k)
        interval = rows[1:] if len(rows) > 1 else rows
        mean = {c: sum(r[i] for r in interval) / len(interval) for i, c in enumerate(cols)}
        out = {_VMSTAT_NAMES[c]: v for c, v in mean.items() if c in _VMSTAT_NAMES}
        if "si" in mean and "so" in mean:
            out["swap_in_per_s"] = mean["si"] / PAGE_KIB
            out["swap_out_per_s"] = mean["so"] / PAGE_KIB
    return out, used


def _pct_table(lines: list[str], idx: Iterable[int]) -> tuple[dict[str, float], str | None, set[int]]:
    """``mpstat`` (the ``all`` row, ``Average:`` preferred) and ``iostat``'s ``avg-cpu`` block (its last
    report)."""
    out: dict[str, float] = {}
    tool: str | None = None
    used: set[int] = set()
    for k in idx:
        line = lines[k]
        if "%steal" not in line and "%iowait" not in line:
            continue
        head = line.split()
        names = [h for h in head if h.startswith("%")]
        if not names:
            continue
        if head[0] == "avg-cpu:" and k + 1 < len(lines):
            vals = [v for v in (_num(t) for t in lines[k + 1].split()) if v is not None]
            if len(vals) == len(names):
                out = {_PCT_NAMES[h]: v for h, v in zip(names, vals, strict=True) if h in _PCT_NAMES}
                tool = "iostat avg-cpu"
                used.update((k + 1, k + 2))
            continue
        if "CPU" not in head:
            continue
        best: dict[str, float] = {}
        for n in range(k + 1, min(len(lines), k + 400)):
            toks = lines[n].split()
            if not toks or "%steal" in lines[n] or "%iowait" in lines[n]:
                break
            if "all" not in toks:
                continue
            vals = [v for v in (_num(t) for t in toks[toks.index("all") + 1 :]) if v is not None]
            if len(vals) != len(names):
                continue
            row = {_PCT_NAMES[h]: v for h, v in zip(names, vals, strict=True) if h in _PCT_NAMES}
            used.add(n + 1)
            if toks[0].startswith("Average") or not best:
                best = row
        if best:
            out, tool = best, ("sar -u" if "%user" in names else "mpstat")  # (mpstat says %usr)
            used.add(k + 1)
    return out, tool, used


_FREE_HEAD = lazyre.compile(r"^\s*total\s+used\s+free\s+shared\s+buff/cache\s+available\s*$")
_FREE_VALUE = lazyre.compile(r"^(?P<n>\d+(?:[.,]\d+)?)(?P<u>[KMGTP]i?|B)?$")
_FREE_CMD = lazyre.compile(
    r"\bfree\s+(?:-\w*?(?P<flag>[bkmgh])\w*|--(?P<long>bytes|kilo|mega|giga|kibi|mebi|gibi|human))"
)  # (-t is "totals", not tebibytes)
_UNIT = {"b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}
_LONG = {"bytes": "b", "kilo": "k", "kibi": "k", "mega": "m", "mebi": "m", "giga": "g", "gibi": "g"}


def _bytes(tok: str, default_unit: str | None) -> int | None:
    """``62G``, ``8,0G``, ``400Mi``, ``0B`` or a bare number in the unit ``free``'s flag chose."""
    m = _FREE_VALUE.match(tok)
    if m is None:
        return None
    unit = (m.group("u") or "")[:1].lower() or default_unit
    if unit is None:
        return None
    return int(float(m.group("n").replace(",", ".")) * _UNIT[unit])


def _free(lines: list[str], idx: Iterable[int]) -> tuple[dict[str, int], set[int]]:
    """``free`` (procps 3.3.10+, with its ``available`` column): total and available memory, swap.  Bare
    numbers are read only when the command above names their unit (plain ``free`` prints KiB, but a paste
    rarely shows whether ``-m`` or ``-g`` was given); ``-h`` values carry their own."""
    out: dict[str, int] = {}
    used: set[int] = set()
    for k in idx:
        if "buff/cache" not in lines[k] or not _FREE_HEAD.match(lines[k]):
            continue
        unit: str | None = None
        for prev in reversed(lines[max(0, k - 3) : k]):
            c = _FREE_CMD.search(prev)
            if c:
                flag = c.group("flag") or _LONG.get(c.group("long") or "", "")
                unit = flag if flag in _UNIT else None
                break
        for n in range(k + 1, min(len(lines), k + 3)):
            toks = lines[n].split()
            if len(toks) >= 7 and toks[0] == "Mem:":
                total, avail = _bytes(toks[1], unit), _bytes(toks[6], unit)
                if total and avail is not None:
                    out["mem_total"], out["mem_available"] = total, avail
                    used.update((k + 1, n + 1))
            elif len(toks) >= 4 and toks[0] == "Swap:" and out:
                st, sf = _bytes(toks[1], unit), _bytes(toks[3], unit)
                if st is not None and sf is not None:
                    out["swap_total"], out["swap_free"] = st, sf
                    used.add(n + 1)
    return out, used


def read(lines: list[str], where: Iterable[int] | None = None) -> tuple[HostFacts | None, set[int]]:
    """Host facts from the pasted tables in ``lines`` (``where``: the 0-based lines that may hold a key
    literal; None: all) and the 1-based line numbers read; (None, empty) when there is none."""
    idx = sorted(range(len(lines)) if where is None else set(where))
    facts = HostFacts()
    used: set[int] = set()
    pct, tool, got = _pct_table(lines, idx)
    used |= got
    vm, got = _vmstat(lines, idx)
    used |= got
    if vm:
        tool = "vmstat"
        facts.swap_in_per_s = vm.pop("swap_in_per_s", None)
        facts.swap_out_per_s = vm.pop("swap_out_per_s", None)
        pct = pct or vm
    top, got = _top(lines, idx)
    used |= got
    if top and not pct:
        pct, tool = top, "top"
    mem, got = _free(lines, idx)
    used |= got
    if not mem:
        mem, got = _top_memory(lines, idx)
        used |= got
    if mem:
        facts.mem_total_bytes, facts.mem_available_bytes = mem["mem_total"], mem["mem_available"]
        facts.swap_total_bytes, facts.swap_free_bytes = mem.get("swap_total"), mem.get("swap_free")
        tool = tool or "free"
    if not pct and facts.swap_in_per_s is None and not mem:
        return None, set()
    facts.cpu_pct = pct
    facts.extra["read_from"] = tool or "pasted table"
    return facts, used
