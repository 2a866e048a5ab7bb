"""A fake NVML at the ``pynvml`` call boundary.

``FakeNvml(...).install(monkeypatch)`` replaces the ``pynvml.nvml*`` functions the reader uses with
fakes answering from per-GPU :class:`FakeGpu` tables.  Errors are the real ``pynvml.NVMLError``
subclasses (built from their codes), so the reader sees exactly what a real binding raises.  A GPU
can raise any NVML error on any call, hang a call, be lost after N calls, and functions can be
missing from the binding altogether.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

H100 = "NVIDIA H100 80GB HBM3"
BUS_IDS = ["00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0",
           "00000000:9A:00.0", "00000000:AB:00.0", "00000000:BA:00.0", "00000000:DB:00.0"]


def err(code: int) -> pynvml.NVMLError:
    """The exact exception class pynvml raises for ``code`` (e.g. NVMLError_GpuIsLost)."""
    return pynvml.NVMLError(code)


def _fv(field_id: int, value: int | float | None, ret: int = 0) -> SimpleNamespace:
    if isinstance(value, float):
        return SimpleNamespace(
            fieldId=field_id, nvmlReturn=ret, valueType=0, value=SimpleNamespace(dVal=value)
        )
    return SimpleNamespace(
        fieldId=field_id, nvmlReturn=ret, valueType=1, value=SimpleNamespace(uiVal=value or 0)
    )


def h100_values(i: int) -> dict[str, Any]:
    """A healthy H100 SXM under load, as NVML returns it (mW, MHz, bytes, raw ints)."""
    return {
        "nvmlDeviceGetName": H100,
        "nvmlDeviceGetUUID": f"GPU-{i:08x}-aaaa-bbbb-cccc-0000000000{i:02d}",
        "nvmlDeviceGetSerial": f"16523220{i:05d}",
        "nvmlDeviceGetPciInfo": SimpleNamespace(busId=BUS_IDS[i % 8].encode(), pciDeviceId=0x233010DE),
        "nvmlDeviceGetVbiosVersion": "96.00.74.00.0D",
        "nvmlDeviceGetArchitecture": 9,
        "nvmlDeviceGetCudaComputeCapability": (9, 0),
        "nvmlDeviceGetTemperatureThreshold": {0: 92, 1: 89, 2: 95, 3: 87},
        "nvmlDeviceGetPowerManagementDefaultLimit": 700_000,
        "nvmlDeviceGetPowerManagementLimitConstraints": [200_000, 700_000],
        "nvmlDeviceGetMaxClockInfo": {1: 1980, 2: 2619},
        "nvmlDeviceGetMaxPcieLinkGeneration": 5,
        "nvmlDeviceGetGpuMaxPcieLinkGeneration": 5,
        "nvmlDeviceGetMaxPcieLinkWidth": 16,
        "nvmlDeviceGetEccMode": [1, 1],
        "nvmlDeviceGetPersistenceMode": 1,
        "nvmlDeviceGetComputeMode": 0,
        "nvmlDeviceGetMigMode": [0, 0],
        "nvmlDeviceGetTemperature": 61,
        "nvmlDeviceGetTemperatureV": 61,
        "nvmlDeviceGetFieldValues": {82: 68, 230: 0},
        "nvmlDeviceGetFanSpeed": err(pynvml.NVML_ERROR_NOT_SUPPORTED),
        "nvmlDeviceGetPowerUsage": 655_123,
        "nvmlDeviceGetEnforcedPowerLimit": 700_000,
        "nvmlDeviceGetPowerManagementLimit": 700_000,
        "nvmlDeviceGetClockInfo": {1: 1980, 2: 2619},
        "nvmlDeviceGetCurrentClocksEventReasons": 0,
        "nvmlDeviceGetCurrentClocksThrottleReasons": 0,
        "nvmlDeviceGetViolationStatus": {p: 0 for p in (0, 1, 2, 3, 4, 5, 10, 11)},
        "nvmlDeviceGetPerformanceState": 0,
        "nvmlDeviceGetUtilizationRates": SimpleNamespace(gpu=98, memory=61),
        "nvmlDeviceGetMemoryInfo": SimpleNamespace(
            total=85_520_809_984, used=74_000_000_000, free=11_520_809_984
        ),
        "nvmlDeviceGetTotalEccErrors": {(0, 0): 0, (1, 0): 0, (0, 1): 0, (1, 1): 0},
        "nvmlDeviceGetRemappedRows": (0, 0, 0, 0),
        "nvmlDeviceGetRetiredPages": err(pynvml.NVML_ERROR_NOT_SUPPORTED),
        "nvmlDeviceGetRetiredPagesPendingStatus": err(pynvml.NVML_ERROR_NOT_SUPPORTED),
        "nvmlDeviceGetCurrPcieLinkGeneration": 5,
        "nvmlDeviceGetCurrPcieLinkWidth": 16,
        "nvmlDeviceGetPcieReplayCounter": 0,
        "nvmlDeviceGetPcieThroughput": {0: 1_200_000, 1: 900_000},
        "nvmlDeviceGetNvLinkState": {link: 1 for link in range(18)},
        "nvmlDeviceGetNvLinkVersion": 4,
        "nvmlDeviceGetNvLinkRemotePciInfo": SimpleNamespace(busId=b"00000000:05:00.0"),
        "nvmlDeviceGetNvLinkErrorCounter": 0,
        "nvmlDeviceGetComputeRunningProcesses": [SimpleNamespace(pid=4242 + i, usedGpuMemory=73_000_000_000)],
        "nvmlDeviceGetGraphicsRunningProcesses": [],
    }


@dataclass
class FakeGpu:
    index: int
    values: dict[str, Any] = field(default_factory=dict)
    hang: set[str] = field(default_factory=set)  # function names that never return
    lose_after: int | None = None  # after this many successful calls every call says GPU_IS_LOST
    calls: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        base = h100_values(self.index)
        base.update(self.values)
        self.values = base

    def set(self, fname: str, value: Any) -> FakeGpu:
        self.values[fname] = value
        return self


@dataclass
class FakeHandle:
    index: int


# Functions the fake answers from the per-GPU table: name -> how the arguments select a value.
_KEYED_BY_FIRST_ARG = {
    "nvmlDeviceGetTemperatureThreshold",
    "nvmlDeviceGetMaxClockInfo",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetPcieThroughput",
    "nvmlDeviceGetNvLinkState",
}
_DEVICE_FUNCS = [k for k in h100_values(0)]


def _shape(fname: str, v: Any, args: tuple[Any, ...]) -> Any:
    """The configured value ``v`` as the real binding returns it for ``fname`` and ``args``."""
    if fname == "nvmlDeviceGetFieldValues":
        ids = args[0]
        out = []
        for fid in ids:
            x = v.get(fid, err(pynvml.NVML_ERROR_NOT_SUPPORTED)) if isinstance(v, dict) else v
            if isinstance(x, BaseException):
                out.append(_fv(fid, None, ret=int(getattr(x, "value", 3))))
            else:
                out.append(_fv(fid, x))
        return out
    if fname == "nvmlDeviceGetViolationStatus":
        ns = v[args[0]] if isinstance(v, dict) else v
        if isinstance(ns, BaseException):
            raise ns
        return SimpleNamespace(referenceTime=10**12, violationTime=ns)
    if fname == "nvmlDeviceGetTotalEccErrors":
        x = v[(args[0], args[1])] if isinstance(v, dict) else v
        if isinstance(x, BaseException):
            raise x
        return x
    if fname == "nvmlDeviceGetRetiredPages":
        x = v[args[0]] if isinstance(v, dict) else v
        if isinstance(x, BaseException):
            raise x
        return [0x1000 * k for k in range(x)]
    if fname in _KEYED_BY_FIRST_ARG and isinstance(v, dict):
        if args[0] not in v:
            raise err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        x = v[args[0]]
        if isinstance(x, BaseException):
            raise x
        return x
    return v



class FakeNvml:
    """The whole library: init behaviour, device count, GPUs, versions, missing functions."""

    def __init__(
        self,
        gpus: Iterable[FakeGpu] | int = 8,
        *,
        init_error: int | None = None,
        init_hang: bool = False,
        missing: Iterable[str] = (),
        driver: str = "550.54.15",
        cuda: int = 12040,
        count_error: int | None = None,
    ) -> None:
        self.gpus = [FakeGpu(i) for i in range(gpus)] if isinstance(gpus, int) else list(gpus)
        self.init_error = init_error
        self.init_hang = init_hang
        self.count_error = count_error
        self.missing = set(missing)
        self.driver = driver
        self.cuda = cuda
        self.release = threading.Event()  # set at teardown so hung fake calls end
        self.inits = 0
        self.shutdowns = 0
        self.mutating_calls: list[str] = []

    def gpu(self, i: int) -> FakeGpu:
        return self.gpus[i]

    # -- library-level --
    def nvmlInit(self) -> None:
        if self.init_hang:
            self.release.wait(30)
        if self.init_error is not None:
            raise err(self.init_error)
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        if self.count_error is not None:
            raise err(self.count_error)
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> FakeHandle:
        g = self.gpus[i]
        v = g.values.get("nvmlDeviceGetHandleByIndex")
        if isinstance(v, BaseException):
            raise v
        if "nvmlDeviceGetHandleByIndex" in g.hang:
            self.release.wait(30)
        return FakeHandle(i)

    def _device_call(self, fname: str) -> Callable[..., Any]:
        def call(handle: FakeHandle, *args: Any) -> Any:
            g = self.gpus[handle.index]
            if g.lose_after is not None and len(g.calls) >= g.lose_after:
                raise err(pynvml.NVML_ERROR_GPU_IS_LOST)
            g.calls.append(fname)
            if fname in g.hang:
                self.release.wait(30)
                raise err(pynvml.NVML_ERROR_UNKNOWN)
            v = g.values[fname]
            if callable(v) and not isinstance(v, type):
                v = v(*args)
            if isinstance(v, BaseException):
                raise v
            return _shape(fname, v, args)

        return call

    def install(self, monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
        lib = {
            "nvmlInit": self.nvmlInit,
            "nvmlShutdown": self.nvmlShutdown,
            "nvmlDeviceGetCount": self.nvmlDeviceGetCount,
            "nvmlDeviceGetHandleByIndex": self.nvmlDeviceGetHandleByIndex,
            "nvmlSystemGetDriverVersion": lambda: self.driver,
            "nvmlSystemGetNVMLVersion": lambda: "12.550.54.15",
            "nvmlSystemGetCudaDriverVersion_v2": lambda: self.cuda,
            "nvmlSystemGetCudaDriverVersion": lambda: self.cuda,
        }
        for fname in _DEVICE_FUNCS:
            lib[fname] = self._device_call(fname)
        for name, fn in lib.items():
            if name in self.missing:
                monkeypatch.delattr(pynvml, name, raising=False)
            else:
                monkeypatch.setattr(pynvml, name, fn)
        # Any state-changing call is a bug: record it and fail loudly.
        for name in dir(pynvml):
            if name.startswith(
                (
                    "nvmlDeviceSet",
                    "nvmlDeviceReset",
                    "nvmlDeviceClear",
                    "nvmlSystemSet",
                    "nvmlDeviceModify",
                    "nvmlGpuInstanceDestroy",
                    "nvmlDeviceCreate",
                )
            ):
                monkeypatch.setattr(pynvml, name, self._forbidden(name))
        return self

    def _forbidden(self, name: str) -> Callable[..., Any]:
        def fn(*a: Any, **k: Any) -> Any:
            self.mutating_calls.append(name)
            raise AssertionError(f"gpuclinic called state-changing {name}")

        return fn
