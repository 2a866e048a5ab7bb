"""The literals each gated format sniffer needs: a sample holding none of a sniffer's literals (ASCII case
folded) is not that format, and the sniffer says so first thing.

The segmenting reader adds all of them to its one whole-text literal search (grep, ASCII case folded), so
for each run of prose lines in a big log it knows which of them the run's head holds without reading the
head, and skips every sniffer whose literals it lacks (:func:`gpuclinic.sources.evidence_text.
detect_structured`'s ``absent``).  A training log has a run of prose between any two kernel lines or
prompts (~170 in the 19 MB bench log), and sniffing each run's 16 KiB head for every format was ~50 ms of
``explain``.  The answers are the same: a literal grep did not find on any line of the head is not in it.

Only literals without a line break, and rare in logs, belong here (a common one would make the literal
search return most of a log's lines; ``GPU `` is no more common than ``gpu``, one of the error signatures'
own literals): sniffers that need ``|``, a comma or an indented line stay ungated.
"""

from __future__ import annotations

BUGREPORT = ("Start of NVIDIA", "nvidia-bug-report.sh ")
SMI_XML = ("<nvidia_smi_log", "&lt;nvidia_smi_log", "</")  # a -q -x dump, escaped or a fragment of one
SMI_TOPO = ("GPU0",)
SMI_NVLINK = ("GPU ", "gpuId ")  # the two GPU line shapes (nvidia-smi, dcgmi)
# keys only `nvidia-smi -q` prints (its sniffer wants two of them on indented lines)
SMI_TEXT_FIELDS = (
    "GPU Current Temp",
    "GPU Shutdown Temp",
    "GPU Slowdown Temp",
    "Pending Page Blacklist",
    "Remapping Failure Occurred",
    "Correctable Error",
    "Uncorrectable Error",
    "Enforced Power Limit",
    "Default Power Limit",
    "Replays Since Reset",
    "HW Power Brake Slowdown",
    "HW Thermal Slowdown",
    "SW Power Cap",
    "SRAM Correctable",
    "DRAM Correctable",
    "DRAM Uncorrectable",
    "Single Bit ECC",
    "Double Bit ECC",
    "Product Name",
    "GPU UUID",
    "VBIOS Version",
    "Performance State",
    "Power Draw",
    "Bus Id",
)
# -q text: its banner, a "GPU <bus id>" line, a clock event reasons section, or two of those keys
SMI_TEXT = ("NVSMI LOG", "GPU ", "Reasons", *(f for f in SMI_TEXT_FIELDS if not f.startswith("GPU ")))
# `lspci -vvv` (its first three) or a listing with NVIDIA's vendor id (`lspci -nn`)
LSPCI = ("LnkSta:", "Kernel driver in use", "Capabilities:", "NVIDIA Corporation", "[10de:")
# a word each nvidia-smi failure statement holds, lower case; a line's case is folded before the test (a
# text holding a character that folds onto ASCII letters, U+017F or U+212A, is read per line)
SMI_ERRORS = (
    "nvidia-smi",
    "nvml",
    "no devices were found",
    "unable to",
    "mismatch",
    "gpu access blocked",
    "nvidia driver",
    "insufficient permissions",
)
REDFISH = ("@odata",)
SENSORS_JSON = ('"Adapter"',)
SENSORS_TEXT = ("Adapter:",)  # `sensors` and `sensors -u`
OPENBMC_LOGUTIL = ("SEL Entry:",)
# ipmitool's outputs that need no "|" column: sensor get / sdr -v, chassis status (case folded), fru,
# sel info, sel list -v (sdr, sensor and sel lists have columns; dcmi needs only "power": both ungated)
IPMI_VERBOSE = ("Sensor ID",)
IPMI_CHASSIS = ("system power",)
IPMI_FRU = ("FRU Device Description",)
IPMI_SEL_INFO = ("SEL Information",)
IPMI_SEL_VERBOSE = ("Event Direction",)
VENDOR_LOG = ("Class ", "ssertion", "EventID: ", "IPMI Status: ", "(Status: ")  # a line of each format

ALL = (
    *BUGREPORT,
    *SMI_XML,
    *SMI_TOPO,
    *SMI_NVLINK,
    *SMI_TEXT,
    *LSPCI,
    *SMI_ERRORS,
    *REDFISH,
    *SENSORS_JSON,
    *SENSORS_TEXT,
    *OPENBMC_LOGUTIL,
    *IPMI_VERBOSE,
    *IPMI_CHASSIS,
    *IPMI_FRU,
    *IPMI_SEL_INFO,
    *IPMI_SEL_VERBOSE,
    *VENDOR_LOG,
)
