"""Parser for ``nvidia-smi -q -x`` XML (DTD versions v1 .. v13).

Safety: the XML may come from anyone (a customer's ticket), so documents declaring entities are
refused (no billion-laughs, no external entities), the DOCTYPE line is dropped before parsing
(xml.etree never fetches it), and input is capped at :data:`MAX_BYTES`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from typing import TYPE_CHECKING

from gpuclinic import lazyre
from gpuclinic.errors import InputError
from gpuclinic.facts.gpu import GpuFacts, GpuProcess
from gpuclinic.facts.snapshot import normalize_bus_id
from gpuclinic.knowledge import gpu_fields
from gpuclinic.sources import smi_common as c
from gpuclinic.sources import sniffgates

if TYPE_CHECKING:  # the XML parser loads when a dump is parsed, not when a text is sniffed
    import xml.etree.ElementTree as ET

MAX_BYTES = 64 * 1024 * 1024
ROOT = "nvidia_smi_log"


def looks_like(sample: str) -> bool:
    head = sample[:65536]
    root, escaped, closing = sniffgates.SMI_XML
    return root in head or escaped in head or _fragment(head)


# A paste that starts inside a GPU's element (an issue excerpt cut at its top: "</double_bit_retirement>",
# "<temperature>", "<gpu_temp>32 C</gpu_temp>" ...): the element lines of a -q -x dump, no root
_ELEMENT_LINE = lazyre.compile(r"^\s*</?([a-z][a-z0-9_]*)(?:\s[^>]*)?>")
_TAG = lazyre.compile(r"<(/?)([a-z][a-z0-9_]*)\b[^>]*?(/?)>")
_FRAGMENT_MIN = 4  # element lines naming a GPU fact's element before a paste is taken for a fragment


@cache
def _leaf_names() -> frozenset[str]:
    """The element names of the GPU facts (``temperature/gpu_temp`` -> temperature, gpu_temp)."""
    return frozenset(
        part.split("@")[0] for row in gpu_fields.fields() for path in row.xml for part in path.split("/")
    )


def _fragment(head: str) -> bool:
    """True when ``head`` is element lines of a -q -x dump without its root (see ``_ELEMENT_LINE``)."""
    if sniffgates.SMI_XML[2] not in head:  # ("</": an element line's closing tag)
        return False
    names = _leaf_names()
    hits = 0
    for line in _lines_starting_with_tag(head, 200):
        m = _ELEMENT_LINE.match(line)
        if m and m.group(1) in names:
            hits += 1
            if hits >= _FRAGMENT_MIN:
                return True
    return False


def _lines_starting_with_tag(head: str, limit: int) -> Iterator[str]:
    """The lines among the first ``limit`` of ``head`` whose first non-space character is ``<``: a ``find``
    per ``<``, not a split of the whole (16 KiB) sample (a training log's head holds a few)."""
    if not head.isascii() or any(c in head for c in ("\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e")):
        yield from (ln for ln in head.splitlines()[:limit] if ln.lstrip().startswith("<"))
        return
    line = pos = 0  # (ASCII, "\n" the only break: the lines are those of splitlines)
    i = head.find("<")
    while i >= 0:
        ls = head.rfind("\n", 0, i) + 1
        line += head.count("\n", pos, ls)
        pos = ls
        if line >= limit:
            return
        end = head.find("\n", i)
        end = len(head) if end < 0 else end
        if not head[ls:i].strip():
            yield head[ls:end]
        i = head.find("<", end)


def _wrap_fragment(text: str) -> str:
    """A fragment as one GPU's document: end tags whose start was cut off dropped, open elements closed."""
    out: list[str] = []
    stack: list[str] = []
    for line in text.splitlines():
        keep = line
        for m in _TAG.finditer(line):
            closing, name, empty = m.group(1), m.group(2), m.group(3)
            if empty:
                continue
            if not closing:
                stack.append(name)
            elif name in stack:
                while stack and stack.pop() != name:
                    pass
            else:  # its start tag is above the paste
                keep = keep.replace(m.group(0), "", 1)
        out.append(keep)
    out.extend(f"</{name}>" for name in reversed(stack))
    return "<nvidia_smi_log><gpu>\n" + "\n".join(out) + "\n</gpu></nvidia_smi_log>"


def unescape_pasted(text: str) -> str:
    """XML copied out of a web page arrives HTML-escaped ("&lt;gpu&gt;", "&nbsp;"), or half-escaped when
    only ">" was ("<gpu&gt;", 1Panel issue 11910): restore it."""
    head = text[:65536]
    if "&lt;nvidia_smi_log" not in head and "<nvidia_smi_log&gt;" not in head:
        return text
    import html  # (here: its entity table is a third of this module's import time, and few texts need it)

    return html.unescape(text).replace("\xa0", " ")


def parse(text: str, origin: str = "<xml>") -> c.SmiDump:
    """Parse one XML dump.  Raises :class:`InputError` for unsafe, oversized or malformed XML."""
    import xml.etree.ElementTree as ET
    text = unescape_pasted(text)
    if len(text) > MAX_BYTES:
        raise InputError(
            f"{origin}: nvidia-smi XML larger than {MAX_BYTES // (1024 * 1024)} MB; refusing to parse"
        )
    if re.search(r"<!ENTITY", text, re.I):
        raise InputError(
            f"{origin}: XML declares entities; refusing to parse (expected plain nvidia-smi -q -x output)"
        )
    start = text.find("<nvidia_smi_log")
    fragment = start < 0 and _fragment(text[:65536])
    if fragment:
        text, start = _wrap_fragment(text), 0
    if start < 0:
        raise InputError(f"{origin}: no <nvidia_smi_log> element (expected nvidia-smi -q -x output)")
    body = text[start:]  # the XML declaration and DOCTYPE before the root carry nothing we need
    end = body.rfind("</nvidia_smi_log>")
    cut = end < 0
    if not cut:
        body = body[: end + len("</nvidia_smi_log>")]
    try:
        parser = ET.XMLParser()
        parser.feed(body)
        root = parser.close()
    except ET.ParseError as e:
        partial = _partial_root(body) if cut else None
        if partial is None or not _holds_facts(partial):
            raise InputError(f"{origin}: malformed nvidia-smi XML ({e})") from None
        root = partial
    else:
        cut = False
    if root.tag != ROOT:
        raise InputError(f"{origin}: root element is <{root.tag}>, expected <{ROOT}>")
    dump = c.SmiDump(kind="smi_xml")
    if fragment:
        dump.notes.append(
            "nvidia-smi XML pasted from inside a GPU's element (no <nvidia_smi_log>, no GPU id): read the "
            "elements it holds"
        )
    if cut:
        dump.notes.append("nvidia-smi XML is cut off (no </nvidia_smi_log>): read the elements it holds")
    dump.timestamp = _t(root, "timestamp")
    # 610+ text output notes "[Deprecated; ... Use KMD Version instead]" after the old keys and adds KMD /
    # CUDA UMD versions; the XML is read the same way (first word; the new element when the old is absent)
    dump.driver_version = _version(root, "driver_version", "kmd_version")
    cv = _version(root, "cuda_version", "cuda_umd_version")
    dump.cuda_version = cv if cv and cv.lower() != "not found" else None
    dump.attached_gpus = c.integer(_t(root, "attached_gpus"))
    for i, el in enumerate(root.findall("gpu")):
        dump.gpus.append(_gpu(i, el))
    return dump


def _version(root: ET.Element, *tags: str) -> str | None:
    """The first of ``tags`` holding a value, without a note after it ("610.57.04 [Deprecated; ...]")."""
    for tag in tags:
        v = c.clean((_t(root, tag) or "").split(" [", 1)[0])
        if v:
            return v
    return None


def _partial_root(body: str) -> ET.Element | None:
    """The elements of an XML dump pasted only in part (issue pastes are often cut off).

    The pull parser builds elements as their start tags arrive; a value whose end tag is missing never
    reaches its element, so what is read is complete.
    """
    import xml.etree.ElementTree as ET
    pp: ET.XMLPullParser[ET.Element] = ET.XMLPullParser(events=("start",))
    try:
        pp.feed(body)
    except ET.ParseError:
        pass
    try:
        for event in pp.read_events():  # (a parse error is queued as an event and raised here)
            el = event[-1]
            if isinstance(el, ET.Element):
                return el  # the first start event is the root; its children were attached as they arrived
    except ET.ParseError:
        pass
    return None


def _holds_facts(root: ET.Element) -> bool:
    """A cut-off dump is worth reading when it names the driver or a GPU; "<nvidia_smi_log><gpu>" is not."""
    return (
        root.find("driver_version") is not None and bool((root.findtext("driver_version") or "").strip())
    ) or any(g.get("id") or g.find("product_name") is not None for g in root.findall("gpu"))


def _t(el: ET.Element | None, path: str) -> str | None:
    if el is None:
        return None
    found = el.find(path)
    if found is None:
        return None
    if len(found):  # a container element: no scalar value
        return None
    return (found.text or "").strip()


_SCHEMA_ROWS = tuple(r for r in gpu_fields.fields() if r.xml_reader == "schema")


def _gpu(index: int, el: ET.Element) -> GpuFacts:
    bus = el.get("id")
    g = GpuFacts(index=index, pci_bus_id=normalize_bus_id(bus) if bus else None)
    # one row per fact, straight from knowledge/data/gpu_fields.json: the first of its element paths (newest
    # DTD first) holding a readable value; an error printed in its place is kept as the reason
    for row in _SCHEMA_ROWS:
        parse = c.SCHEMA_PARSE[row.parse]
        raws = [v for v in (_t(el, p) for p in row.xml) if v is not None]
        value = next((x for x in map(parse, raws) if x is not None), None)
        setattr(g, row.fact, value)
        if value is None and raws and row.parse in c.NUMERIC_PARSE:
            c.note_unreadable(g, row.fact, raws[0])
    # what one row cannot say: derived values, counts summed over a DTD's layout, reason flags, lists
    _pci(g, el)
    _clock_reasons(g, el)
    _memory_health(g, el)
    _temperature_limits(g, el)
    _recovery_action(g, el)
    _processes(g, el)
    return g


def _pci(g: GpuFacts, el: ET.Element) -> None:
    pci = el.find("pci")
    if pci is None:
        return
    bid = c.clean(_t(pci, "pci_bus_id"))
    if bid:
        g.pci_bus_id = normalize_bus_id(bid)
    dev = c.clean(_t(pci, "pci_device_id"))
    if dev:
        g.pci_device_id = dev if dev.lower().startswith("0x") else "0x" + dev
    host = c.integer(_t(pci, "pci_gpu_link_info/pcie_gen/max_host_link_gen"))
    if g.pcie_gen_max is None and g.pcie_gen_gpu_max is not None:
        g.pcie_gen_max = min(g.pcie_gen_gpu_max, host) if host else g.pcie_gen_gpu_max
    if g.pcie_gen_gpu_max is None:
        g.pcie_gen_gpu_max = g.pcie_gen_max


def _clock_reasons(g: GpuFacts, el: ET.Element) -> None:
    """Active clock event (throttle) reasons and their cumulative counters, under either DTD name."""
    reasons = el.find("clocks_event_reasons")
    if reasons is None:
        reasons = el.find("clocks_throttle_reasons")
    if reasons is not None:
        active: dict[str, bool] = {}
        for ch in reasons.iter():
            if ch is reasons:
                continue
            name = c.reason_name(ch.tag)
            on = c.yes_no(ch.text)
            if name and on is not None:
                active[name] = on
        c.set_reasons(g, active)
    counters = el.find("clocks_event_reasons_counters")
    if counters is None:
        counters = el.find("clocks_throttle_reasons_counters")
    if counters is not None:
        for ch in counters:
            name = c.COUNTER_NAMES.get(c.reason_name(ch.tag) or "")
            ns = c.microseconds_ns(ch.text)
            if name and ns is not None:
                g.violation_ns[name] = ns


def _memory_health(g: GpuFacts, el: ET.Element) -> None:
    """ECC counts summed over the DTD's layout, pending page retirement, unreadable row remapping."""
    for scope in ("volatile", "aggregate"):
        node = el.find(f"ecc_errors/{scope}")
        if node is None:
            continue
        corr, unc = _ecc(node)
        if scope == "volatile":
            g.ecc_volatile_corrected, g.ecc_volatile_uncorrected = corr, unc
        else:
            g.ecc_aggregate_corrected, g.ecc_aggregate_uncorrected = corr, unc
    rp = el.find("retired_pages")
    if rp is not None:
        pend = [c.yes_no(_t(rp, p)) for p in ("pending_blacklist", "pending_retirement")]
        known = [p for p in pend if p is not None]
        if known:
            g.retired_pages_pending = any(known)
    rr = el.find("remapped_rows")
    if rr is not None and not len(rr):
        c.note_unreadable(g, "remapped_rows", rr.text)


def _temperature_limits(g: GpuFacts, el: ET.Element) -> None:
    temp = el.find("temperature")
    if temp is not None:
        c.apply_tlimit(
            g,
            c.num(_t(temp, "gpu_temp_tlimit")),
            c.num(_t(temp, "gpu_temp_max_tlimit_threshold")),
            c.num(_t(temp, "gpu_temp_slow_tlimit_threshold")),
            c.num(_t(temp, "gpu_temp_max_gpu_tlimit_threshold")),
        )


def _recovery_action(g: GpuFacts, el: ET.Element) -> None:
    if c.yes_no(_t(el, "gpu_reset_status/drain_and_reset_recommended")):
        g.recovery_action = "drain_and_reset"
    elif c.yes_no(_t(el, "gpu_reset_status/reset_required")):
        g.recovery_action = "gpu_reset"
    ra = c.clean(_t(el, "gpu_recovery_action"))
    if ra and ra.lower() != "none":
        g.recovery_action = "_".join(ra.lower().split())


def _processes(g: GpuFacts, el: ET.Element) -> None:
    procs = el.find("processes")
    if procs is None:
        return
    for p in procs.findall("process_info"):
        pid = c.integer(_t(p, "pid"))
        if pid is None:
            continue
        kind = (_t(p, "type") or "C").strip().upper()
        g.processes.append(
            GpuProcess(
                pid=pid,
                name=c.clean(_t(p, "process_name")),
                used_memory_bytes=c.mib_bytes(_t(p, "used_memory")),
                kind="graphics" if kind == "G" else "compute",
            )
        )


def _ecc(node: ET.Element) -> tuple[int | None, int | None]:
    sb = node.find("single_bit")
    db = node.find("double_bit")
    if sb is not None or db is not None:
        return _total(sb), _total(db)
    corr: int | None = None
    unc: int | None = None
    for ch in node:
        if len(ch) or "threshold" in ch.tag:
            continue
        v = c.integer(ch.text)
        if v is None:
            continue
        if "uncorrectable" in ch.tag:
            unc = (unc or 0) + v
        elif "correctable" in ch.tag:
            corr = (corr or 0) + v
    return corr, unc


def _total(el: ET.Element | None) -> int | None:
    if el is None:
        return None
    tot = c.integer(_t(el, "total"))
    if tot is not None:
        return tot
    nums = [c.integer(ch.text) for ch in el]
    vals = [v for v in nums if v is not None]
    return sum(vals) if vals else None
