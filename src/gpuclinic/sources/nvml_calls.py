"""How one NVML call's outcome becomes a value, a quiet None, an "unreadable" line or a lost GPU.

Kept apart from the per-device readers (:mod:`.nvml_device`) and the reader's thread plumbing
(:mod:`.nvml`): the error vocabulary (nvml.h codes, the sentences a report shows for them) is the one
place that decides what a failed call means, whichever fact it was reading.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpuclinic.errors import SourceUnavailable
from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.sources.nvml_worker import Hung as _Hung

if TYPE_CHECKING:
    from gpuclinic.sources.nvml import NvmlReader

# NVML error codes (nvml.h); kept here so the reader works with any nvidia-ml-py version.
E_NOT_SUPPORTED = 3
E_NO_PERMISSION = 4
E_NOT_FOUND = 6
E_INSUFFICIENT_POWER = 8
E_DRIVER_NOT_LOADED = 9
E_TIMEOUT = 10
E_LIBRARY_NOT_FOUND = 12
E_FUNCTION_NOT_FOUND = 13
E_CORRUPTED_INFOROM = 14
E_GPU_IS_LOST = 15
E_RESET_REQUIRED = 16
E_LIB_RM_VERSION_MISMATCH = 18
E_UNKNOWN = 999
E_INVALID_ARGUMENT = 2

# Errors that only mean "this GPU/driver does not have it": never worth a line in the report.
_QUIET = {E_NOT_SUPPORTED, E_NOT_FOUND, E_INVALID_ARGUMENT}

_INIT_REASONS = {
    E_LIBRARY_NOT_FOUND: "NVML library not found: no NVIDIA driver installed? (libnvidia-ml.so.1 is not "
                         "loadable)",
    E_DRIVER_NOT_LOADED: "driver not loaded: the nvidia kernel module is not running (check `lsmod | grep "
                         "nvidia`, dmesg)",
    E_NO_PERMISSION: "no permission to open the NVIDIA devices (/dev/nvidia*); run as a user in the video "
                     "group or root",
    E_LIB_RM_VERSION_MISMATCH: "NVML library and kernel driver versions differ (driver upgraded without "
                               "reboot?); "
    "reboot or reload the nvidia modules",
    E_UNKNOWN: "NVML failed to initialise with an unknown error (check dmesg for NVRM lines)",
}

_FIELD_REASONS = {
    E_NO_PERMISSION: "no permission (needs root)",
    E_INSUFFICIENT_POWER: "insufficient external power: a GPU power cable is not connected or a PSU failed",
    E_FUNCTION_NOT_FOUND: "not available in this driver (function not found)",
    E_CORRUPTED_INFOROM: "corrupted InfoROM",
    E_RESET_REQUIRED: "GPU requires a reset",
    E_TIMEOUT: "NVML timed out",
    E_UNKNOWN: "NVML unknown error",
}



class NvmlUnavailable(SourceUnavailable):
    """NVML cannot be used at all; the message is the precise reason for the report."""


class StopGpu(Exception):
    """Stop reading this GPU (lost or unresponsive); the GpuFacts already says why."""


def text(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, (bytes, bytearray)) else str(v)


def err_code(e: BaseException) -> int | None:
    v = getattr(e, "value", None)
    return v if isinstance(v, int) else None


class GpuRead:
    """Per-GPU call helper: turns each NVML outcome into a value, a quiet None or an unreadable line."""

    def __init__(self, reader: NvmlReader, g: GpuFacts) -> None:
        self.r = reader
        self.g = g
        self.h: Any = None

    def get(
        self,
        fld: str,
        fname: str,
        *args: Any,
        fallback: str | None = None,
        required: bool = False,
        quiet_all: bool = False,
    ) -> Any:
        r = self.r
        call_args = args if fname == "nvmlDeviceGetHandleByIndex" else (self.h, *args)
        try:
            try:
                return r._raw(fname, *call_args)
            except AttributeError:
                if fallback is None:
                    raise
                return r._raw(fallback, *call_args)
        except _Hung as h:
            r._hung(self.g.index, h.worker)
            self.g.lost = True
            self.g.lost_reason = (
                f"unresponsive: {fname} did not return within {r.call_timeout_s:g}s (driver or GPU hung)"
            )
            raise StopGpu() from None
        except AttributeError:
            if not quiet_all:
                self.g.unreadable[fld] = f"{fname} not in this nvidia-ml-py/driver"
            return None
        except Exception as e:
            code = err_code(e)
            if code == E_GPU_IS_LOST:
                self.g.lost = True
                self.g.lost_reason = (
                    f"GPU is lost (NVML_ERROR_GPU_IS_LOST during {fname}); it has fallen off the bus"
                )
                raise StopGpu() from None
            if code is None:
                self.g.unreadable[fld] = f"{type(e).__name__}: {e}"
            elif code in _QUIET or quiet_all:
                pass
            elif code == E_FUNCTION_NOT_FOUND and fallback is not None:
                try:
                    return r._raw(fallback, *call_args)
                except Exception:
                    self.g.unreadable[fld] = _FIELD_REASONS[E_FUNCTION_NOT_FOUND]
            else:
                self.g.unreadable[fld] = _FIELD_REASONS.get(code, f"NVML error {code}: {text(e)}")
            if required:
                why = _FIELD_REASONS.get(code or 0, f"{fname} failed: {text(e)}")
                self.g.unreadable.setdefault(fld, why)
                if code != E_NO_PERMISSION:
                    # nvidia-smi's "Unable to determine the device handle for GPU ...: Unknown Error": the
                    # classic face of a GPU that fell off the bus. No permission is a container/cgroup matter.
                    self.g.lost = True
                    self.g.lost_reason = f"NVML cannot get a handle for this GPU ({why})"
                raise StopGpu() from None
            return None

    def text(self, fld: str, fname: str) -> str | None:
        v = self.get(fld, fname)
        return text(v).strip() if v is not None else None

    def number(self, fld: str, fname: str, *args: Any) -> float | None:
        v = self.get(fld, fname, *args)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    def intval(self, fld: str, fname: str, *args: Any) -> int | None:
        v = self.get(fld, fname, *args)
        return int(v) if isinstance(v, int) and not isinstance(v, bool) else None

    def milliwatts(self, fld: str, fname: str) -> float | None:
        v = self.number(fld, fname)
        return v / 1000.0 if v is not None else None

    def field_values(self, fld: str, ids: list[int]) -> dict[int, Any]:
        """Batch ``nvmlDeviceGetFieldValues``; each value carries its own return code."""
        vals = self.get(fld, "nvmlDeviceGetFieldValues", ids)
        out: dict[int, Any] = {}
        if vals is None:
            return out
        for fv in vals:
            if getattr(fv, "nvmlReturn", 1) != 0:
                ret = getattr(fv, "nvmlReturn", None)
                if ret == E_GPU_IS_LOST:
                    self.g.lost = True
                    self.g.lost_reason = (
                        "GPU is lost (NVML_ERROR_GPU_IS_LOST in field values); it has fallen off the bus"
                    )
                    raise StopGpu()
                continue
            out[int(fv.fieldId)] = _field_value(fv)
        return out


def _field_value(fv: Any) -> Any:
    vt = getattr(fv, "valueType", None)
    val = fv.value
    readers: dict[int, Callable[[], Any]] = {
        0: lambda: float(val.dVal),
        1: lambda: int(val.uiVal),
        2: lambda: int(val.ulVal),
        3: lambda: int(val.ullVal),
        4: lambda: int(val.sllVal),
        5: lambda: int(val.siVal),
        6: lambda: int(val.usVal),
    }
    return readers.get(vt if isinstance(vt, int) else 1, lambda: int(val.uiVal))()

