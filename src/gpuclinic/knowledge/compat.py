"""CUDA / driver / GPU architecture / PyTorch wheel compatibility, as pure functions over data tables.

The tables (``cuda_driver.json``, ``cuda_arch_support.json``, ``gpu_compute_capability.json``,
``torch_wheels.json``) come from NVIDIA's release notes and compatibility guide and PyTorch's release
matrix, each entry with its source.  The rules:

* A binary built with CUDA X.Y runs on a driver >= the toolkit driver of X.Y (full compatibility),
  or on any driver of the same major family >= the family floor (minor-version compatibility, with
  limits: PTX from a newer toolkit cannot be JIT-compiled, newer APIs fail).  Never across majors
  downward.
* A GPU of compute capability M.m can run SASS ``sm_Mn`` with n <= m (same major only), or PTX
  ``compute_XY`` with XY <= Mm through the driver's JIT.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from gpuclinic.knowledge import load_data
from gpuclinic.record import field, record

Version = tuple[int, ...]


def parse_version(s: str | None) -> Version | None:
    """``"525.60.13"`` -> ``(525, 60, 13)``; ``"12.1"`` -> ``(12, 1)``; junk -> None."""
    if not s:
        return None
    m = re.match(r"\s*v?(\d+(?:\.\d+)*)", str(s))
    if not m:
        return None
    return tuple(int(x) for x in m.group(1).split("."))


def _vstr(v: Version) -> str:
    return ".".join(str(x) for x in v)


# ------------------------------------------------------------------ tables


@cache
def _driver_table() -> dict[str, Any]:
    d = load_data("cuda_driver.json")
    assert isinstance(d, dict)
    return d


@cache
def _torch_table() -> dict[str, Any]:
    d = load_data("torch_wheels.json")
    assert isinstance(d, dict)
    return d


def cuda_releases() -> list[str]:
    """Every CUDA release in the driver table, oldest first."""
    keys = list(_driver_table()["cuda_min_driver"])
    return sorted(keys, key=lambda k: parse_version(k) or (0,))


def min_driver(cuda: str) -> str | None:
    """Minimum Linux driver for full compatibility with CUDA ``cuda`` ("12.1", "12.4.1", "cu121")."""
    cv = cuda_version_of(cuda)
    if cv is None:
        return None
    table = _driver_table()["cuda_min_driver"]
    v = parse_version(cv)
    if v is None:
        return None
    key = _vstr(v)
    if key in table:
        return str(table[key]["linux"])
    # "12.4.0" or an unknown patch release -> the minor's GA entry
    mm = _vstr(v[:2])
    if mm in table:
        return str(table[mm]["linux"])
    return None


def min_driver_source(cuda: str) -> str | None:
    cv = cuda_version_of(cuda)
    v = parse_version(cv) if cv else None
    if v is None:
        return None
    table = _driver_table()["cuda_min_driver"]
    e = table.get(_vstr(v)) or table.get(_vstr(v[:2]))
    return str(e["source"]) if e else None


def family_min_driver(cuda_major: int) -> str | None:
    """Minor-version-compatibility floor (Linux) for CUDA major ``cuda_major`` (11 -> 450.80.02, 12 ->
    525.60.13).

    The compatibility guide names a branch ("525"); the first released driver of that family that
    shipped with the X.0 toolkit is the practical floor, so the higher of the two is returned.
    """
    e = _driver_table()["minor_version_compat"].get(str(cuda_major))
    if not e:
        return None
    floor = str(e["linux_min"])
    ga = _driver_table()["cuda_min_driver"].get(f"{cuda_major}.0")
    if ga:
        fv, gv = parse_version(floor), parse_version(str(ga["linux"]))
        if fv is not None and gv is not None and gv > fv and gv[0] == fv[0]:
            return str(ga["linux"])
    return floor


def driver_max_cuda(driver: str) -> str | None:
    """Highest CUDA X.Y the driver supports with full compatibility (470.82.01 -> "11.4")."""
    dv = parse_version(driver)
    if dv is None:
        return None
    best: Version | None = None
    for k, e in _driver_table()["cuda_min_driver"].items():
        kv, ev = parse_version(k), parse_version(e["linux"])
        if kv is None or ev is None:
            continue
        if dv >= ev and (best is None or kv[:2] > best):
            best = kv[:2]
    return _vstr(best) if best else None


@record
class DriverCompat:
    """Can driver D run code built with CUDA C?  ``mode``: full | minor_version | none | unknown."""

    ok: bool
    mode: str
    cuda: str
    driver: str
    min_driver_full: str | None
    min_driver_family: str | None
    reason: str
    limits: list[str] = field(default_factory=list)


def driver_supports_cuda(driver: str, cuda: str) -> DriverCompat:
    """Apply full and minor-version compatibility (and its limits) to a driver and a CUDA version."""
    cv = cuda_version_of(cuda) or cuda
    dv, v = parse_version(driver), parse_version(cv)
    full = min_driver(cv)
    fam = family_min_driver(v[0]) if v else None
    if dv is None or v is None:
        return DriverCompat(False, "unknown", cv, driver, full, fam, "unreadable version")
    fv = parse_version(full) if full else None
    if fv is not None and dv >= fv:
        return DriverCompat(
            True, "full", cv, driver, full, fam, f"driver {driver} >= {full} required by CUDA {cv}"
        )
    famv = parse_version(fam) if fam else None
    if famv is not None and dv >= famv:
        return DriverCompat(
            True,
            "minor_version",
            cv,
            driver,
            full,
            fam,
            f"driver {driver} is older than {full or '?'} (CUDA {cv}) but within the CUDA {v[0]}.x "
            f"minor-version-compatibility range (>= {fam})",
            limits=[
                f"PTX built by CUDA {cv} cannot be JIT-compiled by this driver "
                "(cudaErrorUnsupportedPtxVersion)",
                "APIs newer than the driver return errors at run time",
            ],
        )
    if fv is None and famv is None:
        return DriverCompat(False, "unknown", cv, driver, full, fam, f"CUDA {cv} is not in the table")
    need = fam if famv is not None else full
    return DriverCompat(
        False,
        "none",
        cv,
        driver,
        full,
        fam,
        f"driver {driver} supports CUDA <= {driver_max_cuda(driver) or '?'}; CUDA {cv} needs >= {need}"
        + (f" (>= {full} for full compatibility)" if full and full != need else ""),
    )


# ------------------------------------------------------------------ GPU architectures


@record(frozen=True)
class ArchList:
    """Architectures compiled into a binary: SASS (``sm_XY``) and PTX (``compute_XY``) as (major, minor)."""

    sass: tuple[tuple[int, int], ...]
    ptx: tuple[tuple[int, int], ...]

    @classmethod
    def parse(cls, items: str | list[str] | tuple[str, ...]) -> ArchList:
        """Accept ``['sm_80', 'compute_90']`` (get_arch_list) or ``"7.0;8.0;9.0+PTX"``
        (TORCH_CUDA_ARCH_LIST)."""
        sass: list[tuple[int, int]] = []
        ptx: list[tuple[int, int]] = []
        toks = re.split(r"[;,\s]+", items) if isinstance(items, str) else list(items)
        for t in toks:
            t = t.strip().lower()
            if not t:
                continue
            m = re.fullmatch(r"(sm|compute)_(\d+)([af]?)", t)
            if m:
                cc = _split_cc(m.group(2))
                if cc is None:
                    continue
                (sass if m.group(1) == "sm" else ptx).append(cc)
                continue
            m = re.fullmatch(r"(\d+)\.(\d+)(\+ptx)?", t)
            if m:
                cc = (int(m.group(1)), int(m.group(2)))
                sass.append(cc)
                if m.group(3):
                    ptx.append(cc)
        return cls(tuple(sorted(set(sass))), tuple(sorted(set(ptx))))

    def names(self) -> list[str]:
        return [f"sm_{a}{b}" for a, b in self.sass] + [f"compute_{a}{b}" for a, b in self.ptx]


def _split_cc(digits: str) -> tuple[int, int] | None:
    if len(digits) < 2:
        return None
    return int(digits[:-1]), int(digits[-1])


def parse_cc(cc: str | tuple[int, int] | None) -> tuple[int, int] | None:
    """``"8.6"``/``"86"``/``"sm_86"``/``(8, 6)`` -> ``(8, 6)``."""
    if cc is None:
        return None
    if isinstance(cc, tuple):
        return cc
    s = str(cc).strip().lower().removeprefix("sm_").removeprefix("compute_")
    m = re.fullmatch(r"([0-9]+)\.([0-9]+)", s)
    if m:
        return int(m.group(1)), int(m.group(2))
    if s.isascii() and s.isdigit():  # str.isdigit() also accepts '²', which int() refuses
        return _split_cc(s)
    return None


@record
class ArchVerdict:
    """Can a binary with this arch list run on a GPU of this compute capability, and how."""

    ok: bool
    via: str  # sass | ptx | none
    detail: str


def can_run(arch_list: ArchList, cc: str | tuple[int, int]) -> ArchVerdict:
    """SASS of the same major with minor <= the GPU's, or PTX <= the GPU's capability (JIT)."""
    g = parse_cc(cc)
    if g is None:
        return ArchVerdict(False, "none", f"unreadable compute capability {cc!r}")
    sass = [a for a in arch_list.sass if a[0] == g[0] and a[1] <= g[1]]
    if sass:
        a = max(sass)
        return ArchVerdict(True, "sass", f"sm_{a[0]}{a[1]} runs on compute capability {g[0]}.{g[1]}")
    ptx = [a for a in arch_list.ptx if a <= g]
    if ptx:
        a = max(ptx)
        return ArchVerdict(
            True, "ptx", f"only PTX compute_{a[0]}{a[1]} can serve {g[0]}.{g[1]} (JIT at first launch)"
        )
    have = ", ".join(arch_list.names()) or "nothing"
    return ArchVerdict(
        False,
        "none",
        f"compute capability {g[0]}.{g[1]} (sm_{g[0]}{g[1]}) is not in [{have}] and no PTX <= it",
    )


def cuda_arch_range(cuda: str) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """(min, max) compute capability nvcc of CUDA ``cuda`` can compile SASS for."""
    cv = cuda_version_of(cuda)
    v = parse_version(cv) if cv else None
    if v is None:
        return None
    table = load_data("cuda_arch_support.json")["cuda_arch_support"]
    e = table.get(_vstr(v[:2]))
    if not e:
        return None
    lo, hi = parse_cc(e["min_cc"]), parse_cc(e["max_cc"])
    return (lo, hi) if lo and hi else None


@cache
def _cc_index() -> tuple[list[tuple[tuple[str, ...], str, str]], list[tuple[re.Pattern[str], str, str]]]:
    d = load_data("gpu_compute_capability.json")
    names = sorted(
        ((_name_tokens(e["name"]), e["cc"], e["name"]) for e in d["gpus"]), key=lambda t: -len(t[0])
    )
    fams = [(re.compile(f["pattern"]), f["cc"], f["pattern"]) for f in d["families"]]
    return names, fams


_DROP = {"nvidia", "tesla", "geforce", "quadro"}


def _name_tokens(name: str) -> tuple[str, ...]:
    toks = re.split(r"[\s\-_/(),]+", name.lower())
    return tuple(t for t in toks if t and t not in _DROP)


def compute_capability_for(name: str | None) -> str | None:
    """Compute capability of a GPU from its NVML/nvidia-smi name ("Tesla V100-SXM2-32GB" -> "7.0")."""
    if not name:
        return None
    toks = _name_tokens(name)
    if not toks:
        return None
    names, fams = _cc_index()
    for key, cc, _ in names:  # longest key first
        if toks[: len(key)] == key:
            return cc
    flat = " ".join(toks)
    for rx, cc, _ in fams:
        if rx.search(flat):
            return cc
    return None


# ------------------------------------------------------------------ PyTorch wheels


def cuda_version_of(s: str | None) -> str | None:
    """``"cu121"`` -> ``"12.1"``, ``"cu118"`` -> ``"11.8"``, ``"12.1"`` -> ``"12.1"``; else None."""
    if not s:
        return None
    t = str(s).strip().lower()
    m = re.fullmatch(r"cu(\d{2,3})", t)
    if m:
        d = m.group(1)
        return f"{d[:-1]}.{d[-1]}"
    v = parse_version(t)
    return _vstr(v) if v else None


def variant_of(cuda: str | None) -> str | None:
    """``"12.1"`` -> ``"cu121"``."""
    v = parse_version(cuda_version_of(cuda))
    if not v or len(v) < 2:
        return None
    return f"cu{v[0]}{v[1]}"


@record(frozen=True)
class TorchBuild:
    """A torch version string split into its version and the CUDA it was built for."""

    version: str  # "2.4.1"
    minor: str  # "2.4"
    variant: str | None  # "cu121" (None: CPU/ROCm/unknown)
    local: str | None  # the "+..." label as installed


def parse_torch_version(version: str, cuda: str | None = None) -> TorchBuild | None:
    """``"2.4.1+cu121"`` (or ``"2.4.1"`` with ``cuda="12.1"`` from torch/version.py) -> TorchBuild."""
    m = re.match(r"\s*(\d+)\.(\d+)(?:\.(\d+))?[^+]*(?:\+(\S+))?", version or "")
    if not m:
        return None
    base = ".".join(x for x in m.group(1, 2, 3) if x is not None)
    local = m.group(4)
    variant = None
    if local and re.fullmatch(r"cu\d{2,3}", local):
        variant = local
    elif cuda:
        variant = variant_of(cuda)
    return TorchBuild(base, f"{m.group(1)}.{m.group(2)}", variant, local)


def torch_variants(torch_minor: str) -> list[str]:
    """Official CUDA wheel variants of a torch release ("2.4" -> ["cu118", "cu121", "cu124"])."""
    e = _torch_table()["variants"].get(torch_minor)
    return list(e["variants"]) if e else []


def torch_arch_list(torch_version: str, variant: str | None = None) -> ArchList | None:
    """Arch list of the official Linux x86 wheel for ``torch_version`` (+ ``variant``), or None if unknown."""
    tb = parse_torch_version(torch_version, None)
    if tb is None:
        return None
    var = variant or tb.variant
    if not var:
        return None
    for e in _torch_table()["arch_lists"]:
        if tb.minor in e["torch"] and e["variant"] == var:
            return ArchList.parse(e["arch_list"])
    return None


def pip_command(torch_version: str, variant: str) -> str:
    return f"pip install torch=={torch_version} --index-url https://download.pytorch.org/whl/{variant}"


@record
class TorchSuggestion:
    """A torch build variant that would run here and the command that installs it."""

    variant: str
    command: str
    driver_mode: str  # full | minor_version
    via: str | None  # sass | ptx | None (GPU unknown)


def suggest_torch_variant(
    torch_version: str, driver: str | None, cc: str | None = None
) -> TorchSuggestion | None:
    """The newest official variant of this torch release that the driver can run and that covers the GPU.

    Prefers full driver compatibility and SASS over minor-version compatibility and PTX.
    """
    tb = parse_torch_version(torch_version)
    if tb is None:
        return None
    cands: list[tuple[tuple[int, int, int], TorchSuggestion]] = []
    for var in torch_variants(tb.minor):
        mode = "full"
        if driver:
            dc = driver_supports_cuda(driver, var)
            if not dc.ok:
                continue
            mode = dc.mode
        via: str | None = None
        if cc:
            al = torch_arch_list(tb.version, var)
            if al is None:
                continue
            av = can_run(al, cc)
            if not av.ok:
                continue
            via = av.via
            if via == "ptx" and mode != "full":
                continue  # PTX JIT needs the full toolkit driver
        v = parse_version(cuda_version_of(var)) or (0, 0)
        score = (
            1 if mode == "full" else 0,
            1 if via != "ptx" else 0,
            v[0] * 100 + (v[1] if len(v) > 1 else 0),
        )
        cands.append((score, TorchSuggestion(var, pip_command(tb.version, var), mode, via)))
    if not cands:
        return None
    cands.sort(key=lambda t: t[0], reverse=True)
    return cands[0][1]


def first_torch_for(cc: str, driver: str | None = None) -> tuple[str, str] | None:
    """(torch minor, variant) of the oldest official wheel with native code for ``cc`` that ``driver`` can
    run."""
    best: tuple[Version, str, str] | None = None
    for e in _torch_table()["arch_lists"]:
        if can_run(ArchList.parse(e["arch_list"]), cc).via != "sass":
            continue
        if driver and not driver_supports_cuda(driver, e["variant"]).ok:
            continue
        for minor in e["torch"]:
            v = parse_version(minor) or (0,)
            if best is None or v < best[0]:
                best = (v, minor, e["variant"])
    return (best[1], best[2]) if best else None


def newest_torch_for_driver(driver: str, cc: str | None = None) -> tuple[str, str] | None:
    """(torch minor, variant) of the newest official wheel the driver can run (and that covers ``cc``)."""
    best: tuple[Version, int, str, str] | None = None
    for minor, e in _torch_table()["variants"].items():
        mv = parse_version(minor)
        if mv is None:
            continue
        for var in e["variants"]:
            dc = driver_supports_cuda(driver, var)
            if not dc.ok:
                continue
            if cc:
                al = torch_arch_list(f"{minor}.0", var)
                if al is None or can_run(al, cc).via != "sass":
                    continue
            full = 1 if dc.mode == "full" else 0
            cv = parse_version(cuda_version_of(var)) or (0,)
            key = (mv, full * 1000 + (cv[0] * 10 + (cv[1] if len(cv) > 1 else 0)))
            if best is None or key > (best[0], best[1]):
                best = (mv, key[1], minor, var)
    return (best[2], best[3]) if best else None
