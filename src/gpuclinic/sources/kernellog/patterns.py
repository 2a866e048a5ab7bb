"""Kernel-log message patterns (Xid, SXid, fallen off the bus, init/GSP/NVLink, AER, module lines)
and the sniff that says whether a text reads like a kernel log."""

from __future__ import annotations

import re
from functools import lru_cache

from gpuclinic import lazyre
from gpuclinic.sources.kernellog.formats import (
    _FACILITIES,
    _LEVELS,
)

# --------------------------------------------------------------------------------------------------
# Message patterns
# --------------------------------------------------------------------------------------------------

_BDF = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"
_DEV = rf"(?P<drv>[\w.-]+) (?P<dev>{_BDF}):\s*"

_RE_XID = lazyre.compile(
    # the bus id may be redacted by the poster: "Xid (PCI:...)", "Xid (PCI:XXXX:XX:XX)", "Xid (<redacted>)";
    # drivers of 2006-2012 printed bus:slot only, "Xid (0001:00): 6, PE0001" (``old``)
    rf"(?<!S)Xid \((?:PCI:)?(?:(?P<bus>{_BDF})|(?P<old>[0-9a-fA-F]{{4}}:[0-9a-fA-F]{{2}})|[.xX*#<>a-zA-Z_:-]{{1,24}}?)(?:\s+GPU-I:(?P<gi>\w+))?(?:\s+GPU-CI:(?P<ci>\w+))?\):\s*"  # noqa: E501
    r"(?P<xid>\d{1,4})\b,?\s*(?P<rest>.*)$"
)
_RE_PID = lazyre.compile(r"^pid=(?P<pid>'?<unknown>'?|'?\d+'?)\s*(?:,\s*|$)")
_RE_NAME = lazyre.compile(r"^name=(?P<name>.*?)(?:,\s+|,$|$)")
_RE_CAUSED = lazyre.compile(r"caused by previous Xid (\d+)", re.I)
_RE_LINK = lazyre.compile(r"\b[Ll]ink\s*(?:#\s*)?(\d{1,3})\b", need="ink")
_RE_NVL5 = lazyre.compile(
    r"^(?P<unit>[A-Z][A-Z0-9_]+)\s+(?P<sev>Fatal|Nonfatal|Non-fatal|NonFatal)\s+(?P<xc>XC\d+)\s+(?P<inst>i\d+)\s+"
    r"Link\s+(?P<link>-?\d+)\s*\((?P<words>[^)]*)(?:\)|$)"  # (a pasted line cut before its ")" too)
)
_RE_SXID = lazyre.compile(rf"SXid \((?:PCI:)?(?P<bus>{_BDF})\):\s*(?P<sxid>\d{{1,6}}),\s*(?P<rest>.*)$")
_RE_NVSWITCH = lazyre.compile(r"nvidia-nvswitch(\d+)")
_RE_UUID = lazyre.compile(rf"NVRM: GPU at (?:PCI:)?(?P<bus>{_BDF}): (?P<uuid>GPU-[0-9a-fA-F-]{{36}})")
_RE_FOB_ONE = lazyre.compile(rf"(?:GPU (?:at )?(?:PCI:)?(?P<bus>{_BDF}):? (?:GPU )?has fallen off the bus)")
_RE_FOB_MULTI = lazyre.compile(
    rf"The NVIDIA GPU (?:at )?(?:PCI:)?(?P<bus>{_BDF})\s*(?:\(PCI ID: "
    rf"(?P<pciid>[0-9a-fA-F]{{4}}:[0-9a-fA-F]{{4}})\))?"
    r".*?fallen\s+off\s+the\s+bus",
    re.S,
)
_RE_NOT_SUPPORTED = lazyre.compile(
    rf"The NVIDIA GPU (?:at )?(?:PCI:)?(?P<bus>{_BDF})\s*(?:\(PCI ID: (?P<pciid>[0-9a-fA-F:]+)\))?"
    r".*?installed in this system is\s+not supported by\s+(?P<rest>.*)",
    re.S,
)
_RE_INIT = lazyre.compile(
    # (Hopper/Blackwell boot GSP through the FSP: "kfspPollForResponse_IMPL: FSP command timed out", the GPU
    # never comes up and nvidia-smi finds no device, NVIDIA/nvtrust#77)
    rf"(?:GPU (?P<bus>{_BDF}):\s*)?"
    r"(?P<what>RmInitAdapter failed!?|rm_init_adapter failed|FSP command timed out)"
    r"(?:\s*\((?P<code>0x[0-9a-fA-F:x]+)\))?"
)
_RE_PROBE = lazyre.compile(rf"probe of (?P<bus>{_BDF}) failed with error (?P<err>-?\d+)")
_RE_POWER_CABLES = lazyre.compile(
    rf"GPU (?P<bus>{_BDF}):.*(?:power cables?|auxiliary power).*not connected|"
    rf"GPU (?P<bus2>{_BDF}):.*does not have the necessary power",
    re.I,
)
_RE_GSP_TIMEOUT = lazyre.compile(
    r"Timeout after (?P<secs>\d+)s of waiting for RPC response from GPU(?P<gpu>\d+) GSP!"
    r"(?:\s*Expected function (?P<fn>\d+) \((?P<fname>\w+)\))?"
)
_RE_GSP = lazyre.compile(
    r"(?P<what>GSP RPC|RPC history|heartbeat|GSP crashed|GSP[- ]RM.*?(?:halt|crash|error|fail)|kgspLogXid\w*|"
    r"GSP Timeout|GSP Error|GSP task exception|kgsp\w*(?:Fail|Error|Timeout)\w*|"
    r"kgspProcessRpcEvent: Failed to process|"  # a GSP event (RC_TRIGGERED ...) the driver lost, OGKM#1045
    r"Cannot initialize GSP|GSP firmware|GSP init|bootstrap GSP|GSP\b.*?(?:fail|error|timeout|crash))",
    re.I,
)
_RE_GPU_N = lazyre.compile(r"\bGPU(\d{1,3})\b")
_RE_NVLINK = lazyre.compile(r"NVLink|nvlink|NVLINK")
_RE_NVLINK_BAD = lazyre.compile(r"error|fatal|fail|down|timeout|fault|training", re.I)
_RE_LIMITED = lazyre.compile(
    rf"(?:{_DEV})?(?P<avail>[\d.]+) Gb/s available PCIe bandwidth, limited by (?P<speed>[\d.]+) GT/s "
    rf"(?:PCIe )?x(?P<width>\d+) link at (?P<at>{_BDF}) \(capable of (?P<cap>[\d.]+) Gb/s with "
    r"(?P<capspeed>[\d.]+) GT/s (?:PCIe )?x(?P<capwidth>\d+) link\)"
)
_RE_PCI_ENUM = lazyre.compile(
    rf"pci (?P<dev>{_BDF}): \[10de:(?P<did>[0-9a-fA-F]{{4}})\] type \d+ class 0x(?P<cls>[0-9a-fA-F]+)"
)
_RE_API_MISMATCH = lazyre.compile(
    r"client(?: '(?P<who>[^']*)'(?: \(pid \d+\))?)? has the version (?P<client>\d+(?:\.\d+)*),? but .*?"
    r"kernel module has\s+(?:NVRM:\s+)?the version (?P<kernel>\d+(?:\.\d+)*)"
)
_RE_DRIVER_LOADED = lazyre.compile(
    r"NVRM(?: version)?: (?:loading )?NVIDIA UNIX (?:Open )?(?:[\w-]+ )?Kernel Module(?: for \w+)?\s+"
    r"(?P<ver>\d+\.\d+(?:\.\d+)?)"
)
# "nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX platforms  570.124.06  ..." and the open
# flavour
_RE_MODESET_LOADED = lazyre.compile(
    r"nvidia-modeset: Loading NVIDIA (?:UNIX )?(?:Open )?Kernel Mode Setting Driver for "
    r"\S+(?: platforms)?\s+(?P<ver>\d+\.\d+(?:\.\d+)?)"
)

# nvidia module problems: (regex, sub-kind, severity hint)
_MODULE_PATTERNS: tuple[tuple[lazyre.LazyPattern, str, str], ...] = (
    (lazyre.compile(r"API mismatch"), "api_mismatch", "critical"),
    (lazyre.compile(r"nvidia(?:[\w-]*): Unknown symbol (?P<sym>\S+)"), "unknown_symbol", "critical"),
    (
        lazyre.compile(
            r"nvidia(?:[\w-]*): (?:disagrees about version of symbol (?P<sym>\S+)"
            r"|version magic '[^']*' should be )"
        ),
        "symbol_version",
        "critical",
    ),
    (
        lazyre.compile(
            r"No NVIDIA GPU found|No NVIDIA devices probed|No NVIDIA graphics adapter (?:found|probed)"
        ),
        "no_gpu_found",
        "critical",
    ),
    (lazyre.compile(r"NVIDIA init module failed"), "insert_failed", "critical"),
    (
        lazyre.compile(r"Direct firmware load for nvidia/\S+ failed|No firmware image found"),
        "firmware_missing",
        "critical",
    ),
    (lazyre.compile(r"The NVIDIA probe routine failed for (?P<n>\d+) device"), "probe_failed", "critical"),
    (
        lazyre.compile(r"The NVIDIA probe routine was not called for (?P<n>\d+) device"),
        "probe_not_called",
        "warning",
    ),
    (
        lazyre.compile(r"This PCI I/O region assigned to your NVIDIA device is invalid"),
        "bar_invalid",
        "critical",
    ),
    (lazyre.compile(r"failed to copy vbios to system memory"), "vbios_copy_failed", "critical"),
    (lazyre.compile(r"nvidia(?:[\w-]*): module verification failed"), "verification_failed", "info"),
    (lazyre.compile(r"nvidia(?:[\w-]*): module license '[^']*' taints kernel"), "taints_kernel", "info"),
    (lazyre.compile(r"nvidia-modeset: (?:ERROR|WARNING)[:\s]"), "modeset_error", "info"),
    (
        lazyre.compile(r"nvidia(?:[\w-]*): (?:Unknown parameter|unknown parameter)"),
        "unknown_parameter",
        "warning",
    ),
    (
        lazyre.compile(r"NVRM: (?:request_mem_region failed|RmInitAdapter|failed to allocate) ", re.I),
        "resource",
        "warning",
    ),
    (
        lazyre.compile(r"NVRM: Failed to (?:create|initialize|register|load) [^\n]*", re.I),
        "load_failure",
        "warning",
    ),
    (
        lazyre.compile(r"insmod: ERROR: could not insert module nvidia|modprobe: (?:FATAL|ERROR):.*nvidia"),
        "insert_failed",
        "critical",
    ),
)

# AER (drivers/pci/pcie/aer.c across kernel versions, and APEI firmware-first output)
_RE_AER_RECV = lazyre.compile(
    rf"{_DEV}(?:AER: )?(?P<multi>Multiple )?(?P<sev>Corrected|Correctable|Uncorrected|Uncorrectable)"
    r"(?: \((?P<fatal>Non-Fatal|Fatal)\))? error (?:message )?received(?: "
    r"from|:)\s*(?:id=)?(?P<src>[0-9a-fA-F:.]+)",
    need="received",
)
_RE_AER_BUS = lazyre.compile(
    rf"(?:{_DEV})?(?:AER: )?PCIe Bus Error: severity=(?P<sev>[A-Za-z]+)(?: \((?P<fatal>Non-Fatal|Fatal)\))?,?"
    r"\s*type=(?P<type>[^,]+?)\s*(?:,\s*(?:id=(?P<id>[0-9a-fA-F]+))?\s*\((?P<agent>[^)]+)\))?\s*$",
    need="Bus Error: severity=",
)
_RE_AER_STATUS = lazyre.compile(
    rf"{_DEV}(?:AER: )?\s*device \[(?P<vd>[0-9a-fA-F]{{4}}:[0-9a-fA-F]{{4}})\] error status/mask="
    r"(?P<status>[0-9a-fA-F]+)/(?P<mask>[0-9a-fA-F]+)",
    need="status/mask=",
)
_RE_AER_BIT = lazyre.compile(
    rf"{_DEV}(?:AER: )?\s*\[\s*(?P<bit>\d{{1,2}})\s*\]\s+(?P<name>[A-Za-z][\w "
    r"]*?)\s*(?P<first>\(First\))?\s*$",
    need="[",
)
_RE_AER_FW_STATUS = lazyre.compile(
    rf"{_DEV}(?:AER: )?aer_status: 0x(?P<status>[0-9a-fA-F]+), aer_mask: 0x(?P<mask>[0-9a-fA-F]+)",
    need="aer_status: 0x",
)
_RE_AER_FW_LAYER = lazyre.compile(
    rf"{_DEV}(?:AER: )?aer_layer=(?P<type>[^,]+), aer_agent=(?P<agent>.+?)\s*$", need="aer_layer="
)
# AER recovery naming the devices below the port that reported the error (the GPU, usually)
_RE_AER_DOWNSTREAM = lazyre.compile(
    rf"{_DEV}(?:AER: )?(?:device has no AER-aware driver|can't recover \(no error_detected callback\)|"
    r"(?:PCI )?error_detected\b|device recovery (?:successful|failed))"
)
_RE_HW_SEV = lazyre.compile(r"\[Hardware Error\]:\s+(?:event severity|Error \d+, type): (?P<sev>\w+)")
_RE_AER_RECOVERY = lazyre.compile(
    rf"{_DEV}(?:AER: )?[Dd]evice recovery (?P<res>successful|failed)", need="evice recovery "
)

_CORRECTABLE_BITS = {
    "RxErr",
    "BadTLP",
    "BadDLLP",
    "Rollover",
    "Timeout",
    "NonFatalErr",
    "CorrIntErr",
    "HeaderOF",
    # names printed by older kernels
    "Receiver Error",
    "Bad TLP",
    "Bad DLLP",
    "RELAY_NUM Rollover",
    "Replay Timer Timeout",
    "Advisory Non-Fatal",
}


def _norm_sev(sev: str, fatal: str | None) -> str:
    s = sev.lower()
    if s.startswith("corr"):
        return "corrected"
    if fatal:
        return "fatal" if fatal.lower() == "fatal" else "nonfatal"
    if s in ("fatal",):
        return "fatal"
    if s.startswith("uncorr") or s in ("recoverable", "nonfatal"):
        return "nonfatal"
    return s


# A log names the same few devices thousands of times: each spelling is normalised once.
@lru_cache(maxsize=4096)
def _norm_bus(s: str) -> str:
    """``facts.snapshot.normalize_bus_id``, cached; imported on the first call: it brings ``gpuclinic.model``,
    which a bare file scan does not need before grep's first lines arrive."""
    from gpuclinic.facts.snapshot import normalize_bus_id

    return normalize_bus_id(s)


def _bus(s: str | None) -> str | None:
    return _norm_bus(s) if s else None


_RE_SNIFF = lazyre.compile(
    r"(?m)^(?:\d{1,7}[:-]? ?(?=\[))?(?:<\d>)?"  # a line number (grep -n, an editor) before the stamp
    r"(?:\[\s*\d+\.\d+\]|\[[A-Z][a-z]{2} [A-Z][a-z]{2}\s+\d+ [\d:]+ \d{4}\]|"
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\S*\s+\S+\s+kernel:|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[,.]\d+[+-]\d\d:?\d\d\s|"
    r"[A-Z][a-z]{2}\s+\d{1,2} \d\d:\d\d:\d\d(?:\.\d+)? \S+ kernel:|"
    rf"{_FACILITIES}\s*:\s*{_LEVELS}\s*:|\d{{1,3}},\d+,\d+,[^;]*;)"
)


def looks_like_kernel_log(text_sample: str) -> bool:
    """True when ``text_sample`` reads like a kernel log (dmesg, journal, syslog kernel lines, kmsg).

    Needs either NVIDIA/AER kernel messages or several lines with kernel-log prefixes, so a
    program's own log or an ``nvidia-smi`` dump is not mistaken for one.
    """
    if not text_sample:
        return False
    sample = text_sample[:200_000]
    # literal guards first: each regex needs its literal, and a search without one is slow on big samples
    if ("Xid (" in sample and (_RE_XID.search(sample) or _RE_SXID.search(sample))) or "NVRM:" in sample:
        return True
    if "PCIe Bus Error: severity=" in sample or ("received" in sample and _RE_AER_RECV.search(sample)):
        return True
    if '"_TRANSPORT":"kernel"' in sample or '"_TRANSPORT" : "kernel"' in sample:
        return True  # journalctl -o json(-pretty) of kernel messages
    lines = list(filter(str.strip, sample.splitlines()[:400]))  # the non-blank ones (a C loop)
    if not lines:
        return False
    # hits >= 3 and hits >= half the lines, decided as soon as the rest cannot change it: a prose run
    # (most of a long training log) is ruled out after half its lines, not all 400
    need = max(3, (len(lines) + 1) // 2)
    spare = len(lines) - need  # misses allowed
    if spare < 0:
        return False
    hits = misses = 0
    for ln in lines:
        if _RE_SNIFF.match(ln):
            hits += 1
            if hits >= need:
                return True
        else:
            misses += 1
            if misses > spare:
                return False
    return False
