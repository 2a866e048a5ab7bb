"""CUDA against the driver and the GPU: is the driver new enough for each framework's CUDA, and was each
framework (and the toolkit) built for this GPU's architecture.

Kept apart from the driver/module/daemon checks (:mod:`.software`): these two compare version and
architecture tables (``knowledge/compat.py``) against what the frameworks need, and their remedies are
computed from those tables (which driver, which wheel).
"""

from __future__ import annotations

from collections.abc import Iterator

from gpuclinic.checks import CheckSkipped, check
from gpuclinic.checks.software import SRC_MVC, _driver, _gpu_cc, _ref, _sw
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.facts.software import Framework, SoftwareFacts
from gpuclinic.knowledge import compat
from gpuclinic.knowledge.codes import finding, severity
from gpuclinic.model import Family, Finding


def _cuda_users(sw: SoftwareFacts) -> list[tuple[str, str, Framework | None]]:
    """(label, CUDA version, framework) for every framework and toolkit that needs the driver."""
    out: list[tuple[str, str, Framework | None]] = []
    for f in sw.frameworks:
        if not f.cuda:
            continue
        cuda = f.cuda.replace(".x", ".0") if f.cuda.endswith(".x") else f.cuda
        out.append((f"{f.name} {f.version}", cuda, f))
    for t in sw.cuda_toolkits:
        if t.version and t.nvcc:
            out.append((f"CUDA toolkit {t.version} ({t.path})", t.version, None))
    return out


def _fix_for(label: str, fw: Framework | None, driver: str, dc: compat.DriverCompat, cc: str | None) -> str:
    need = dc.min_driver_full or dc.min_driver_family
    upgrade = f"upgrade the driver to >= {need}"
    if fw is not None and fw.name == "torch":
        tb = compat.parse_torch_version(fw.version, fw.cuda)
        sug = compat.suggest_torch_variant(tb.version, driver, cc) if tb else None
        if sug:
            return f"install the {sug.variant} build (`{sug.command}`) or {upgrade}"
        return (f"{upgrade}, or install an older torch built for CUDA <= "
                f"{compat.driver_max_cuda(driver) or '?'}")
    if fw is not None and fw.name.startswith("jax"):
        return f"{upgrade} (jax[cuda12] wheels need >= 525.60.13), or use a CPU/older-CUDA jax"
    if fw is not None and fw.name.startswith("cupy"):
        return f"{upgrade}, or install the cupy package for the driver's CUDA (`pip install cupy-cuda11x`)"
    if fw is None:
        return (f"{upgrade}; or build with an older CUDA toolkit "
                "(the toolkit only matters for code you compile)")
    return f"{upgrade}, or install a {fw.name} build for CUDA <= {compat.driver_max_cuda(driver) or '?'}"


@check("driver.too_old_for_cuda", codes=["driver.too_old_for_cuda"], what="driver version vs framework CUDA")
def too_old(snap: Snapshot) -> Iterator[Finding]:
    sw = _sw(snap)
    driver = _driver(snap)
    if not driver:
        raise CheckSkipped("driver version unknown")
    users = _cuda_users(sw)
    in_container = snap.container is not None and snap.container.in_container
    image_cuda = snap.container.env.get("CUDA_VERSION") if snap.container and in_container else None
    if image_cuda and compat.parse_version(image_cuda):
        users.append((f"the container image's CUDA {image_cuda} (CUDA_VERSION)", image_cuda, None))
    if not users:
        raise CheckSkipped("no CUDA framework or toolkit found")
    cc = next((c for c in (_gpu_cc(g) for g in snap.gpus) if c), None)
    for label, cuda, fw in users:
        major_only = fw is not None and bool(fw.cuda and fw.cuda.endswith(".x"))
        dc = compat.driver_supports_cuda(driver, cuda)
        if dc.mode == "unknown":
            continue
        if major_only and dc.mode == "minor_version":
            continue  # "cuda12" packages only promise the family floor
        maxc = compat.driver_max_cuda(driver) or "?"
        if not dc.ok:
            sev = severity("driver.too_old_for_cuda", None if fw is not None else "toolkit_only")
            if fw is None and sw.compat_libs_on_path:
                continue  # forward-compatibility libraries (cuda-compat) are in use: they bridge the gap
            need = dc.min_driver_family or dc.min_driver_full
            title = f"Driver {driver} is too old for {label} (CUDA {cuda})"
            remedy = (f"driver {driver} supports CUDA <= {maxc}; {label} needs >= {need}"
                      + (f" (>= {dc.min_driver_full} for full compatibility)"
                         if dc.min_driver_full and dc.min_driver_full != need else "")
                      + " — " + _fix_for(label, fw, driver, dc, cc))
        elif dc.mode == "minor_version":
            sev = severity("driver.too_old_for_cuda", "minor_version")
            title = f"{label} (CUDA {cuda}) runs on driver {driver} only through minor-version compatibility"
            remedy = ("It works, with limits: " + "; ".join(dc.limits)
                      + f". For full compatibility upgrade the driver to >= {dc.min_driver_full}.")
        else:
            continue
        yield Finding(
            code="driver.too_old_for_cuda", severity=sev, family=Family.SOFTWARE, title=title,
            evidence=[dc.reason, f"driver {driver} supports CUDA <= {maxc} without compatibility packages"],
            remedy=remedy,
            data={"driver": driver, "cuda": cuda, "what": label, "mode": dc.mode,
                  "min_driver_full": dc.min_driver_full, "min_driver_family": dc.min_driver_family},
            source=compat.min_driver_source(cuda) or SRC_MVC,
        )


@check("cuda.arch_not_supported", codes=["cuda.arch_not_supported", "cuda.toolkit_arch_unsupported"],
       what="framework architectures vs GPU compute capability")
def arch_support(snap: Snapshot) -> Iterator[Finding]:
    sw = _sw(snap)
    if not snap.gpus:
        raise CheckSkipped("no GPUs read")
    torch = sw.framework("torch")
    driver = _driver(snap)
    seen: set[tuple[str, str]] = set()
    for g in snap.gpus:
        cc = _gpu_cc(g)
        if not cc:
            continue
        if torch is not None and torch.cuda:
            al = compat.ArchList.parse(torch.arch_list) if torch.arch_list else None
            if al is None:
                continue
            v = compat.can_run(al, cc)
            mvc = bool(driver and compat.driver_supports_cuda(driver, torch.cuda).mode == "minor_version")
            if v.ok and not (v.via == "ptx" and mvc):
                if v.via == "ptx" and ("torch", cc) not in seen:
                    seen.add(("torch", cc))
                    yield finding(
                        "cuda.arch_not_supported",
                        when="unknown_build",
                        gpu=_ref(g),
                        title=f"torch {torch.version} has no native code for {g.name or 'this GPU'} "
                              f"(sm_{cc.replace('.', '')}); it relies on PTX JIT",
                        evidence=[v.detail, f"arch list ({torch.arch_list_source or 'metadata'}): "
                                            f"{', '.join(torch.arch_list)}"],
                        remedy="Kernels are JIT-compiled at first use (slow start, some libraries fail); "
                               "install a build with native "
                               "code for this GPU: " + _arch_fix(torch, cc, driver),
                        data={"compute_capability": cc, "via": "ptx"},
                    )
                continue
            tb = compat.parse_torch_version(torch.version, torch.cuda)
            why = v.detail if not v.ok else (
                f"{v.detail}, but driver {driver} runs CUDA {torch.cuda} only through minor-version "
                "compatibility, "
                "which cannot JIT newer PTX")
            yield finding(
                "cuda.arch_not_supported", gpu=_ref(g),
                title=f"torch {torch.version} cannot run on {g.name or 'GPU'} (compute capability {cc}): "
                      "\"no kernel image is available\"",
                evidence=[why, f"arch list ({torch.arch_list_source or 'metadata'}): "
                               f"{', '.join(torch.arch_list)}"],
                remedy=_arch_fix(torch, cc, driver),
                data={"compute_capability": cc, "torch": torch.version, "variant": tb.variant if tb else None,
                      "arch_list": torch.arch_list},
                source="https://github.com/pytorch/pytorch/issues/167244",
            )
        dflt = next((t for t in sw.cuda_toolkits if t.is_default and t.nvcc and t.version), None)
        if dflt is not None and dflt.version and ("nvcc", cc) not in seen:
            rng = compat.cuda_arch_range(dflt.version)
            gcc = compat.parse_cc(cc)
            if rng and gcc and not (rng[0] <= gcc <= rng[1]):
                seen.add(("nvcc", cc))
                lo, hi = rng
                yield finding(
                    "cuda.toolkit_arch_unsupported", gpu=_ref(g),
                    title=f"nvcc {dflt.version} cannot compile for {g.name or 'this GPU'} "
                          f"(sm_{cc.replace('.', '')})",
                    evidence=[f"CUDA {dflt.version} compiles SASS for compute capability "
                              f"{lo[0]}.{lo[1]}..{hi[0]}.{hi[1]}",
                              f"default toolkit: {dflt.path}"],
                    remedy=("Extensions you build here (flash-attn, apex, custom ops) will fail or lack this "
                            "GPU: install a CUDA "
                            "toolkit whose range covers it and point CUDA_HOME at it, and set "
                            f"TORCH_CUDA_ARCH_LIST={cc} when building."),
                    data={"toolkit": dflt.version, "compute_capability": cc},
                    source="https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html",
                )


def _arch_fix(torch: Framework, cc: str, driver: str | None) -> str:
    tb = compat.parse_torch_version(torch.version, torch.cuda)
    sug = compat.suggest_torch_variant(tb.version, driver, cc) if tb else None
    if sug and sug.via == "sass":
        return f"install the {sug.variant} build of the same release: `{sug.command}`"
    first = compat.first_torch_for(cc, driver)
    if first:
        minor, var = first
        return (f"no {tb.variant if tb else ''} wheel of torch {tb.minor if tb else torch.version} covers "
                f"sm_{cc.replace('.', '')}; "
                f"use torch >= {minor} with {var}: `pip install 'torch>={minor}' --index-url https://download.pytorch.org/whl/{var}`"
                + ("" if not driver else f" (needs driver >= {compat.min_driver(var)})"))
    return (f"no official torch wheel in the table covers sm_{cc.replace('.', '')} with driver {driver}; "
            "upgrade the driver "
            f"and use the newest torch, or build torch with TORCH_CUDA_ARCH_LIST={cc}")
