"""Driver, kernel module, CUDA toolkits and Python GPU frameworks, read from files only.

Why files: importing torch costs seconds and may itself fail on the very problem we diagnose, and a
shell-out to ``modinfo``/``dkms`` is slow and absent in containers.  Everything here reads ``/proc``,
``/sys``, ``/lib/modules``, ``/var/lib/dkms``, ``/usr/local/cuda*`` and package metadata under a
``root`` so tests run on fake trees.  ``--deep`` additionally asks torch for its real arch list in a
child process.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import platform
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gpuclinic.facts.software import CudaToolkit, Framework, SoftwareFacts
from gpuclinic.knowledge import compat
from gpuclinic.sources._fs import read_text as _read
from gpuclinic.sources._fs import under as _p

if TYPE_CHECKING:
    from gpuclinic.collect import CollectOptions
    from gpuclinic.facts.snapshot import Snapshot

WHAT = "driver and framework software"
SECURE_BOOT_VAR = "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
LIB_DIRS = (
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "usr/lib64",
    "usr/lib",
    "lib/x86_64-linux-gnu",
    "lib64",
    "usr/local/nvidia/lib64",
    "usr/local/nvidia/lib",
    "usr/lib/wsl/lib",
)
MODPROBE_DIRS = ("etc/modprobe.d", "usr/lib/modprobe.d", "lib/modprobe.d", "run/modprobe.d")
FRAMEWORKS = {
    "torch",
    "jax",
    "jaxlib",
    "jax-cuda12-plugin",
    "jax-cuda12-pjrt",
    "jax-cuda13-plugin",
    "jax-cuda13-pjrt",
    "tensorflow",
    "tensorflow-gpu",
    "tf-nightly",
    "cupy",
    "cupy-cuda11x",
    "cupy-cuda12x",
    "cupy-cuda13x",
    "paddlepaddle-gpu",
    "paddlepaddle",
    "onnxruntime-gpu",
}


# ------------------------------------------------------------------ kernel module

_PROC_VER = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+\.\d+(?:\.\d+)?)")


def parse_proc_driver_version(text: str) -> tuple[str | None, str | None]:
    """``/proc/driver/nvidia/version`` -> (version, "open"|"proprietary")."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    m = _PROC_VER.search(first)
    flavor = None
    if first:
        flavor = "open" if "Open Kernel Module" in first else "proprietary"
    return (m.group(1) if m else None), flavor


def loaded_modules(root: str | os.PathLike[str]) -> set[str] | None:
    text = _read(_p(root, "proc/modules"))
    if text is None:
        return None
    return {line.split(" ", 1)[0] for line in text.splitlines() if line.strip()}


def nouveau_blacklisted(root: str | os.PathLike[str]) -> bool:
    """``blacklist nouveau`` / ``install nouveau /bin/false`` in modprobe.d, or on the kernel command line."""
    cmdline = _read(_p(root, "proc/cmdline")) or ""
    if re.search(
        r"(?:modprobe\.blacklist=\S*nouveau|rd\.driver\.blacklist=\S*nouveau|nouveau\.modeset=0)", cmdline
    ):
        return True
    for d in MODPROBE_DIRS:
        dp = _p(root, d)
        try:
            files = sorted(dp.iterdir())
        except OSError:
            continue
        for f in files:
            if not f.name.endswith(".conf"):
                continue
            for line in (_read(f) or "").splitlines():
                s = line.split("#", 1)[0].strip()
                if re.fullmatch(r"blacklist\s+nouveau", s) or re.fullmatch(
                    r"install\s+nouveau\s+/bin/(?:false|true)", s
                ):
                    return True
    return False


def _has_nvidia_ko(moddir: Path, budget: list[int]) -> bool:
    """Look for nvidia.ko(.xz/.zst/.gz) under a /lib/modules/<kernel> tree, walking at most
    ``budget`` dirs."""
    try:
        for _dirpath, dirnames, filenames in os.walk(moddir):
            budget[0] -= 1
            if budget[0] <= 0:
                return False
            for f in filenames:
                if re.fullmatch(r"nvidia\.ko(?:\.xz|\.zst|\.gz)?", f):
                    return True
            dirnames[:] = [d for d in dirnames if d not in ("sound", "net", "fs", "crypto", "arch")]
    except OSError:
        return False
    return False


def dkms_status(root: str | os.PathLike[str]) -> list[str]:
    """``dkms status`` lines rebuilt from /var/lib/dkms/nvidia/<ver>/<kernel>/<arch>."""
    out: list[str] = []
    base = _p(root, "var/lib/dkms")
    try:
        mods = [d for d in base.iterdir() if d.name.startswith("nvidia")]
    except OSError:
        return out
    for mod in sorted(mods):
        try:
            vers = [v for v in mod.iterdir() if v.is_dir() and re.match(r"\d", v.name)]
        except OSError:
            continue
        for v in sorted(vers):
            kernels = []
            try:
                kernels = [k for k in v.iterdir() if k.is_dir() and k.name not in ("build", "source")]
            except OSError:
                pass
            if not kernels:
                out.append(f"{mod.name}/{v.name}: added")
            for k in sorted(kernels):
                try:
                    arches = [a.name for a in k.iterdir() if a.is_dir()]
                except OSError:
                    arches = []
                out.append(f"{mod.name}/{v.name}, {k.name}, {','.join(arches) or '?'}: installed")
    return out


def secure_boot(root: str | os.PathLike[str]) -> bool | None:
    """True/False from the SecureBoot EFI variable; False on legacy BIOS; None when unreadable."""
    if not _p(root, "sys/firmware/efi").exists():
        return False if _p(root, "sys/firmware").exists() else None
    try:
        data = _p(root, SECURE_BOOT_VAR).read_bytes()
    except OSError:
        return None
    if len(data) >= 5:
        return data[4] == 1
    return None


# ------------------------------------------------------------------ processes


def running_comms(root: str | os.PathLike[str], limit: int = 100_000) -> set[str] | None:
    """Command names (``comm``, max 15 chars) of the processes we can see."""
    proc = _p(root, "proc")
    try:
        entries = [e for e in os.listdir(proc) if e.isdigit()]
    except OSError:
        return None
    out: set[str] = set()
    for e in entries[:limit]:
        c = _read(proc / e / "comm", 256)
        if c:
            out.add(c.strip())
    return out


# ------------------------------------------------------------------ libraries and toolkits


def lib_versions(root: str | os.PathLike[str], stem: str, extra_dirs: Iterable[str] = ()) -> list[str]:
    """Versions X.Y[.Z] of ``<stem>.so.X.Y[.Z]`` found in the usual library directories."""
    found: set[str] = set()
    rx = re.compile(re.escape(stem) + r"\.so\.(\d+\.\d+(?:\.\d+)?)$")
    for d in (*LIB_DIRS, *extra_dirs):
        try:
            names = os.listdir(_p(root, d))
        except OSError:
            continue
        for n in names:
            m = rx.match(n)
            if m:
                found.add(m.group(1))
    return sorted(found, key=lambda v: compat.parse_version(v) or (0,))


def cuda_toolkits(root: str | os.PathLike[str]) -> list[CudaToolkit]:
    """Toolkits under /usr/local/cuda*, /opt/cuda*: version from version.json (11.1+) or version.txt."""
    cands: list[Path] = []
    for parent, prefix in (("usr/local", "cuda"), ("opt", "cuda")):
        try:
            cands += [x for x in _p(root, parent).iterdir() if x.name.startswith(prefix)]
        except OSError:
            continue
    default_real = None
    dflt = _p(root, "usr/local/cuda")
    if dflt.exists():
        try:
            default_real = dflt.resolve()
        except OSError:
            default_real = None
    seen: set[Path] = set()
    out: list[CudaToolkit] = []
    for c in sorted(cands):
        try:
            real = c.resolve()
        except OSError:
            continue
        if real in seen or not real.is_dir():
            continue
        seen.add(real)
        version = None
        vj = _read(real / "version.json")
        if vj:
            try:
                version = json.loads(vj).get("cuda", {}).get("version")
            except (ValueError, AttributeError):
                version = None
        if version is None:
            vt = _read(real / "version.txt") or ""
            m = re.search(r"CUDA Version (\d+\.\d+(?:\.\d+)?)", vt)
            version = m.group(1) if m else None
        if version is None:
            m = re.search(r"cuda-(\d+\.\d+)", real.name) or re.search(r"cuda-(\d+\.\d+)", c.name)
            version = m.group(1) if m else None
        out.append(
            CudaToolkit(
                path=str(c),
                version=version,
                nvcc=(real / "bin" / "nvcc").exists(),
                is_default=default_real is not None and real == default_real,
            )
        )
    return out


def os_release(root: str | os.PathLike[str]) -> dict[str, str]:
    text = _read(_p(root, "etc/os-release")) or _read(_p(root, "usr/lib/os-release")) or ""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip().strip('"').strip("'")
    return out


# ------------------------------------------------------------------ frameworks


def _dist_file(dist: md.Distribution, rel: str) -> str | None:
    try:
        return _read(Path(str(dist.locate_file(rel))), 256 * 1024)
    except (OSError, NotImplementedError, TypeError):
        return None


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


_TORCH_CUDA = re.compile(r"^cuda\s*(?::[^=\n]*)?=\s*['\"]([^'\"]+)['\"]", re.M)
_TORCH_HIP = re.compile(r"^hip\s*(?::[^=\n]*)?=\s*['\"]([^'\"]+)['\"]", re.M)


def _requires_versions(dist: md.Distribution, installed: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for req in dist.requires or []:
        m = re.match(r"\s*(nvidia-[A-Za-z0-9_.-]+)", req)
        if m:
            n = _norm(m.group(1))
            out[n] = installed.get(n, "missing")
    return out


def frameworks(paths: Sequence[str] | None = None) -> list[Framework]:
    """Every GPU framework in the environment (``paths``: sys.path-like), from metadata and files only."""
    dists = list(md.distributions(path=list(paths)) if paths is not None else md.distributions())
    installed: dict[str, str] = {}
    for d in dists:
        try:
            installed.setdefault(_norm(d.metadata["Name"] or ""), d.version)
        except (KeyError, TypeError):
            continue
    out: list[Framework] = []
    seen: set[str] = set()
    for d in dists:
        try:
            name = _norm(d.metadata["Name"] or "")
        except (KeyError, TypeError):
            continue
        if name not in FRAMEWORKS or name in seen:
            continue
        seen.add(name)
        fw = Framework(name=name, version=d.version)
        try:
            fw.location = str(d.locate_file(""))
        except (NotImplementedError, TypeError):
            fw.location = None
        fw.cuda_wheels = _requires_versions(d, installed)
        if name == "torch":
            _fill_torch(d, fw)
        elif name in ("jaxlib",) or name.startswith("jax-cuda"):
            _fill_jax(fw)
        elif name.startswith("tensorflow") or name == "tf-nightly":
            _fill_tf(d, fw)
        elif name.startswith("cupy"):
            m = re.match(r"cupy-cuda(\d+)x", name)
            fw.cuda = f"{m.group(1)}.x" if m else None
        elif name.startswith("paddlepaddle"):
            _fill_paddle(d, fw)
        cudnn = (
            fw.cuda_wheels.get("nvidia-cudnn-cu12")
            or fw.cuda_wheels.get("nvidia-cudnn-cu11")
            or fw.cuda_wheels.get("nvidia-cudnn-cu13")
        )
        if fw.cudnn is None and cudnn and cudnn != "missing":
            fw.cudnn = cudnn
        out.append(fw)
    return sorted(out, key=lambda f: f.name)


def _fill_torch(d: md.Distribution, fw: Framework) -> None:
    text = _dist_file(d, "torch/version.py") or ""
    m = _TORCH_CUDA.search(text)
    if m and m.group(1) not in ("None",):
        fw.cuda = m.group(1)
    if _TORCH_HIP.search(text):
        fw.cuda = None
    tb = compat.parse_torch_version(fw.version, fw.cuda)
    if fw.cuda is None and tb and tb.variant:
        fw.cuda = compat.cuda_version_of(tb.variant)
    if tb and tb.variant:
        al = compat.torch_arch_list(tb.version, tb.variant)
        if al is not None:
            fw.arch_list = al.names()
            fw.arch_list_source = "table"


def _fill_jax(fw: Framework) -> None:
    m = re.search(r"cuda(\d+)", fw.name)
    if m:
        fw.cuda = f"{m.group(1)}.x"
    loc = re.search(r"\+cuda(\d+)(?:\.cudnn(\d)(\d+))?", fw.version)
    if loc:
        fw.cuda = f"{loc.group(1)}.x"
        if loc.group(2):
            fw.cudnn = f"{loc.group(2)}.{loc.group(3)}"


def _fill_tf(d: md.Distribution, fw: Framework) -> None:
    text = _dist_file(d, "tensorflow/python/platform/build_info.py") or ""
    m = re.search(r"['\"]cuda_version['\"]\s*[:,]\s*['\"]([^'\"]+)['\"]", text)
    if m:
        fw.cuda = m.group(1).lstrip("64_") or None
    m = re.search(r"['\"]cudnn_version['\"]\s*[:,]\s*['\"]([^'\"]+)['\"]", text)
    if m:
        fw.cudnn = m.group(1).lstrip("64_") or None


def _fill_paddle(d: md.Distribution, fw: Framework) -> None:
    text = _dist_file(d, "paddle/version/__init__.py") or ""
    m = re.search(r"^cuda_version\s*=\s*['\"]([^'\"]+)['\"]", text, re.M)
    if m and m.group(1) != "False":
        fw.cuda = m.group(1)
    m = re.search(r"^cudnn_version\s*=\s*['\"]([^'\"]+)['\"]", text, re.M)
    if m and m.group(1) != "False":
        fw.cudnn = m.group(1)
    if fw.cuda is None:
        m = re.search(r"\.post(\d{3})$", fw.version)  # "2.6.1.post120" = CUDA 12.0, "post118" = 11.8
        if m:
            fw.cuda = f"{m.group(1)[:-1]}.{m.group(1)[-1]}"


def active_env_paths(env: Mapping[str, str]) -> tuple[list[str] | None, str]:
    """sys.path-like search path and python of the user's active environment.

    gpuclinic may be installed with pipx or in its own venv while the user's torch lives in the
    activated virtualenv/conda env: read that env's site-packages too (first), and use its python
    for ``--deep``.  Returns (None, sys.executable) when the active env is our own.
    """
    paths: list[str] = []
    python = sys.executable
    for var in ("VIRTUAL_ENV", "CONDA_PREFIX"):
        prefix = env.get(var)
        if not prefix or os.path.realpath(prefix) == os.path.realpath(sys.prefix):
            continue
        for sp in sorted(Path(prefix).glob("lib/python3*/site-packages")) + sorted(
            Path(prefix).glob("Lib/site-packages")
        ):
            paths.append(str(sp))
        cand = Path(prefix) / "bin" / "python"
        if cand.exists() and python == sys.executable:
            python = str(cand)
    if not paths:
        return None, sys.executable
    return paths + [p for p in sys.path if p], python


def deep_torch(python: str = sys.executable, timeout_s: float = 90.0) -> dict[str, object] | None:
    """Ask torch itself (in a child process, so a crash or hang cannot take us down)."""
    code = (
        "import json,torch;c=torch.cuda;print(json.dumps({'version':torch.__version__,"
        "'cuda':torch.version.cuda,"
        "'arch_list':c.get_arch_list() if c.is_available() else [],'available':c.is_available(),"
        "'cudnn':torch.backends.cudnn.version()}))"
    )
    try:
        r = subprocess.run(
            [python, "-c", code],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={**os.environ, "CUDA_MODULE_LOADING": "LAZY"},
        )
    except (OSError, subprocess.SubprocessError):
        return None
    for line in reversed(r.stdout.splitlines()):
        try:
            out = json.loads(line)
        except ValueError:
            continue
        if isinstance(out, dict):
            return out
    return None


# ------------------------------------------------------------------ all together


def _module_kernels(sw: SoftwareFacts, root: str | os.PathLike[str], krel: str | None) -> None:
    """Which installed kernels have an nvidia.ko, and whether the running one does."""
    modroot = _p(root, "lib/modules")
    if modroot.is_dir():
        budget = [4000]
        try:
            kernels = sorted(k.name for k in modroot.iterdir() if k.is_dir())
        except OSError:
            kernels = []
        for k in kernels[:20]:
            if _has_nvidia_ko(modroot / k, budget):
                sw.module_kernels.append(k)
        if krel:
            sw.module_for_kernel = krel in sw.module_kernels


def read_software(
    root: str | os.PathLike[str] = "/",
    env: Mapping[str, str] | None = None,
    python_paths: Sequence[str] | None = None,
    deep: bool = False,
) -> SoftwareFacts:
    """Read every software fact under ``root`` (a real or fake filesystem)."""
    env = os.environ if env is None else env
    sw = SoftwareFacts()
    text = _read(_p(root, "proc/driver/nvidia/version"))
    if text:
        sw.proc_driver_text = text.strip().splitlines()[0][:300]
        sw.proc_driver_version, sw.kernel_module_flavor = parse_proc_driver_version(text)
    mods = loaded_modules(root)
    if mods is not None:
        sw.kernel_module_loaded = "nvidia" in mods
        sw.nouveau_loaded = "nouveau" in mods
    elif text:
        sw.kernel_module_loaded = True
    sw.nouveau_blacklisted = nouveau_blacklisted(root)
    krel = (_read(_p(root, "proc/sys/kernel/osrelease")) or "").strip() or None
    sw.running_kernel = krel
    _module_kernels(sw, root, krel)
    sw.dkms_status = dkms_status(root)
    sw.secure_boot = secure_boot(root)
    comms = running_comms(root)
    if comms is not None:
        sw.persistenced_running = any(c.startswith("nvidia-persiste") for c in comms)
        sw.fabricmanager_running = any(c.startswith("nv-fabricmanage") for c in comms)
    sw.fabricmanager_installed = any(
        _p(root, x).exists()
        for x in (
            "usr/bin/nv-fabricmanager",
            "lib/systemd/system/nvidia-fabricmanager.service",
            "usr/lib/systemd/system/nvidia-fabricmanager.service",
            "etc/systemd/system/nvidia-fabricmanager.service",
        )
    )
    ld = [x for x in env.get("LD_LIBRARY_PATH", "").split(":") if x]
    extra_dirs = [x.lstrip("/") for x in ld]
    sw.user_lib_versions = lib_versions(root, "libnvidia-ml", extra_dirs)
    sw.libcuda_versions = lib_versions(root, "libcuda", extra_dirs)
    sw.compat_libs_on_path = [x for x in ld if re.search(r"/cuda[^/]*/compat/?$", x)]
    sw.cuda_toolkits = cuda_toolkits(root)
    rel = os_release(root)
    sw.os_id, sw.os_version, sw.os_pretty = rel.get("ID"), rel.get("VERSION_ID"), rel.get("PRETTY_NAME")
    sw.arch = platform.machine() or None
    sw.python = platform.python_version()
    python = sys.executable
    if python_paths is None:
        python_paths, python = active_env_paths(env)
        if python_paths is not None:
            sw.extra["python_env"] = python
    try:
        sw.frameworks = frameworks(python_paths)
    except Exception as e:  # broken metadata must not hide the rest
        sw.extra["frameworks_error"] = f"{type(e).__name__}: {e}"
    if deep and Path(root).resolve() == Path("/"):
        t = sw.framework("torch")
        if t is not None:
            info = deep_torch(python)
            arch = info.get("arch_list") if info else None
            if isinstance(arch, list) and arch:
                t.arch_list = [str(x) for x in arch]
                t.arch_list_source = "import"
            if info and info.get("cudnn"):
                t.cudnn = str(info["cudnn"])
    sw.driver_version = sw.proc_driver_version
    return sw


def collect(snap: Snapshot, opts: CollectOptions) -> None:
    sw = read_software(deep=opts.deep)
    if snap.software is not None:  # keep what NVML/evidence already put there
        sw.nvidia_smi_errors = list(snap.software.nvidia_smi_errors)
    sw.driver_version = snap.driver_version or sw.proc_driver_version
    sw.nvswitch_count = (
        sum(1 for d in snap.pci_devices if (d.class_code or "").startswith("0x0680"))
        if snap.pci_read
        else None
    )
    snap.software = sw
    if not snap.driver_version and sw.proc_driver_version:
        snap.driver_version = sw.proc_driver_version
