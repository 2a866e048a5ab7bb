"""The measurement workload, run as a child process of the *user's* Python (``accept --python``).

Why a stand-alone script: it must run in whatever environment holds the user's PyTorch or CuPy,
which may not have gpuclinic installed.  It imports only the standard library and the backend,
installs nothing, never touches clocks or power limits, and prints one JSON object per line:

    {"event": "backend", "backend": "torch", "version": "2.4.0", "device": "cuda", "devices": [...]}
    {"event": "result", "test": "matmul", "gpu": 0, "dtype": "bf16", "value": 712.3, "unit": "TFLOPS"}
    {"event": "skip", "test": "fp8", "gpu": 0, "why": "..."}
    {"event": "burn", "t": 3.0, "gpu": 0, "value": 690.1}
    {"event": "done"}

``--device cpu`` runs the same code paths on the CPU (labelled "cpu"); tests use it where no GPU
exists.  SIGTERM/SIGINT stop it within one matmul.
"""

from __future__ import annotations

import argparse
import functools
import json
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

STOP = threading.Event()
INTERRUPTED = threading.Event()


def _on_signal(*_: Any) -> None:
    INTERRUPTED.set()
    STOP.set()


_OUT_LOCK = threading.Lock()


def emit(**kw: Any) -> None:
    line = json.dumps(kw) + "\n"
    with _OUT_LOCK:  # burn threads report too: one whole line at a time
        sys.stdout.write(line)
        sys.stdout.flush()


def _timed(
    fn: Callable[[], None], sync: Callable[[], None], secs: float, min_iters: int = 3
) -> tuple[int, float]:
    """Run ``fn`` repeatedly for about ``secs`` (after one warm-up); return (iterations, seconds)."""
    fn()
    sync()
    iters, t0 = 0, time.perf_counter()
    batch = 1
    while not STOP.is_set():
        for _ in range(batch):
            fn()
        sync()
        iters += batch
        el = time.perf_counter() - t0
        if el >= secs and iters >= min_iters:
            return iters, el
        if el < secs / 8:
            batch = min(batch * 2, 64)
    return iters, max(time.perf_counter() - t0, 1e-9)


# --------------------------------------------------------------------------------------------------
# PyTorch


class TorchBackend:
    name = "torch"

    def __init__(self, device: str) -> None:
        import torch

        self.torch = torch
        self.device = device
        self.version = str(torch.__version__)
        if device == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(
                f"torch {self.version} cannot use CUDA here "
                f"(built for CUDA {torch.version.cuda}; torch.cuda.is_available() is False)"
            )

    def devices(self) -> list[dict[str, Any]]:
        if self.device == "cpu":
            return [{"index": 0, "name": "cpu", "bus_id": None, "uuid": None}]
        out = []
        for i in range(self.torch.cuda.device_count()):
            p = self.torch.cuda.get_device_properties(i)
            bus = None
            if getattr(p, "pci_bus_id", None) is not None:
                dom, dev = getattr(p, "pci_domain_id", 0), getattr(p, "pci_device_id", 0)
                bus = f"{dom:04x}:{p.pci_bus_id:02x}:{dev:02x}.0"
            uuid = getattr(p, "uuid", None)
            out.append(
                {
                    "index": i,
                    "name": p.name,
                    "bus_id": bus,
                    "uuid": str(uuid) if uuid is not None else None,
                    "memory_bytes": int(p.total_memory),
                }
            )
        return out

    def dev(self, i: int) -> Any:
        return self.torch.device("cpu") if self.device == "cpu" else self.torch.device("cuda", i)

    def sync(self, i: int | None = None) -> None:
        if self.device == "cuda":
            if i is None:
                for k in range(self.torch.cuda.device_count()):
                    self.torch.cuda.synchronize(k)
            else:
                self.torch.cuda.synchronize(i)

    def matmul(self, i: int, dtype: str, n: int, secs: float) -> float:
        t = self.torch
        d = self.dev(i)
        if dtype == "fp8":
            return self._fp8(i, n, secs)
        tdt = {"bf16": t.bfloat16, "fp16": t.float16, "tf32": t.float32, "fp32": t.float32}[dtype]
        if self.device == "cuda":
            t.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
        elif dtype == "tf32":
            raise RuntimeError("TF32 is a tensor-core format; a CPU has none")
        a = t.randn(n, n, device=d).to(tdt)
        b = t.randn(n, n, device=d).to(tdt)
        c = t.empty(n, n, device=d, dtype=tdt)
        iters, el = _timed(lambda: t.matmul(a, b, out=c), lambda: self.sync(i), secs)
        return 2.0 * n**3 * iters / el / 1e12

    def _fp8(self, i: int, n: int, secs: float) -> float:
        t = self.torch
        if self.device == "cpu" or not hasattr(t, "float8_e4m3fn") or not hasattr(t, "_scaled_mm"):
            raise RuntimeError(f"torch {self.version} on {self.device} has no FP8 matmul (torch._scaled_mm)")
        d = self.dev(i)
        a = t.randn(n, n, device=d).to(t.float8_e4m3fn)
        b = t.randn(n, n, device=d).to(t.float8_e4m3fn).t()  # _scaled_mm wants column-major B
        one = t.tensor(1.0, device=d)
        iters, el = _timed(
            lambda: t._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=t.bfloat16),
            lambda: self.sync(i),
            secs,
        )
        return 2.0 * n**3 * iters / el / 1e12

    def hbm(self, i: int, mb: int, secs: float) -> float:
        t = self.torch
        nbytes = mb * 2**20
        src = t.empty(nbytes, dtype=t.uint8, device=self.dev(i))
        src.fill_(1)
        dst = t.empty_like(src)
        iters, el = _timed(lambda: dst.copy_(src), lambda: self.sync(i), secs)
        return 2.0 * nbytes * iters / el / 1e9  # read + write

    def pcie(self, i: int, mb: int, secs: float, direction: str) -> float:
        t = self.torch
        if self.device == "cpu":
            raise RuntimeError("no host<->device link on the cpu device")
        nbytes = mb * 2**20
        host = t.empty(nbytes, dtype=t.uint8).pin_memory()
        devt = t.empty(nbytes, dtype=t.uint8, device=self.dev(i))
        if direction == "h2d":
            fn: Callable[[], Any] = lambda: devt.copy_(host, non_blocking=True)  # noqa: E731
        else:
            fn = lambda: host.copy_(devt, non_blocking=True)  # noqa: E731
        iters, el = _timed(fn, lambda: self.sync(i), secs)
        return nbytes * iters / el / 1e9

    def p2p(self, i: int, j: int, mb: int, secs: float) -> tuple[float, bool]:
        t = self.torch
        if self.device == "cpu":
            raise RuntimeError("no GPU peers on the cpu device")
        peer = bool(t.cuda.can_device_access_peer(i, j))
        nbytes = mb * 2**20
        src = t.empty(nbytes, dtype=t.uint8, device=self.dev(i))
        dst = t.empty(nbytes, dtype=t.uint8, device=self.dev(j))

        def sync() -> None:
            self.sync(i)
            self.sync(j)

        iters, el = _timed(lambda: dst.copy_(src, non_blocking=True), sync, secs)
        return nbytes * iters / el / 1e9, peer

    def allreduce(self, ndev: int, mb: int, secs: float) -> float:
        t = self.torch
        if self.device == "cpu":
            raise RuntimeError("NCCL needs CUDA GPUs")
        import torch.cuda.nccl as nccl

        n = mb * 2**20 // 4
        ts = [t.ones(n, dtype=t.float32, device=self.dev(k)) for k in range(ndev)]
        if not nccl.is_available(ts):
            raise RuntimeError("NCCL is not available in this torch build")
        iters, el = _timed(lambda: nccl.all_reduce(ts), lambda: self.sync(), secs)
        algbw = 4 * n * iters / el / 1e9
        return algbw * 2 * (ndev - 1) / ndev

    def burn_loop(self, i: int, n: int, counter: list[float]) -> None:
        t = self.torch
        d = self.dev(i)
        tdt = t.bfloat16
        a = t.randn(n, n, device=d).to(tdt)
        b = t.randn(n, n, device=d).to(tdt)
        c = t.empty(n, n, device=d, dtype=tdt)
        while not STOP.is_set():
            for _ in range(4 if self.device == "cpu" else 16):
                t.matmul(a, b, out=c)
            self.sync(i)
            counter[0] += (4 if self.device == "cpu" else 16) * 2.0 * n**3


# --------------------------------------------------------------------------------------------------
# CuPy


class CupyBackend:
    name = "cupy"

    def __init__(self, device: str) -> None:
        if device != "cuda":
            raise RuntimeError("CuPy runs on CUDA GPUs only")
        import cupy

        self.cp = cupy
        self.device = device
        self.version = str(cupy.__version__)
        cupy.cuda.runtime.getDeviceCount()

    def devices(self) -> list[dict[str, Any]]:
        cp = self.cp
        out = []
        for i in range(cp.cuda.runtime.getDeviceCount()):
            p = cp.cuda.runtime.getDeviceProperties(i)
            name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
            bus = f"{p.get('pciDomainID', 0):04x}:{p.get('pciBusID', 0):02x}:{p.get('pciDeviceID', 0):02x}.0"
            out.append(
                {
                    "index": i,
                    "name": name,
                    "bus_id": bus,
                    "uuid": None,
                    "memory_bytes": int(p["totalGlobalMem"]),
                }
            )
        return out

    def sync(self, i: int | None = None) -> None:
        cp = self.cp
        for k in [i] if i is not None else range(cp.cuda.runtime.getDeviceCount()):
            with cp.cuda.Device(k):
                cp.cuda.runtime.deviceSynchronize()

    def matmul(self, i: int, dtype: str, n: int, secs: float) -> float:
        cp = self.cp
        if dtype not in ("fp16", "fp32"):
            raise RuntimeError(
                f"{dtype} matmul is measured with PyTorch only (CuPy has no {dtype} GEMM path here)"
            )
        with cp.cuda.Device(i):
            dt = cp.float16 if dtype == "fp16" else cp.float32
            a = cp.random.standard_normal((n, n), dtype=cp.float32).astype(dt)
            b = cp.random.standard_normal((n, n), dtype=cp.float32).astype(dt)
            c = cp.empty((n, n), dtype=dt)
            iters, el = _timed(lambda: cp.matmul(a, b, out=c), lambda: self.sync(i), secs)
        return 2.0 * n**3 * iters / el / 1e12

    def hbm(self, i: int, mb: int, secs: float) -> float:
        cp = self.cp
        nbytes = mb * 2**20
        with cp.cuda.Device(i):
            src = cp.ones(nbytes, dtype=cp.uint8)
            dst = cp.empty_like(src)
            iters, el = _timed(lambda: dst.__setitem__(slice(None), src), lambda: self.sync(i), secs)
        return 2.0 * nbytes * iters / el / 1e9

    def pcie(self, i: int, mb: int, secs: float, direction: str) -> float:
        cp = self.cp
        nbytes = mb * 2**20
        with cp.cuda.Device(i):
            mem = cp.cuda.alloc_pinned_memory(nbytes)
            devm = cp.cuda.alloc(nbytes)
            kind = 1 if direction == "h2d" else 2  # cudaMemcpyHostToDevice / DeviceToHost
            dst, src = (devm.ptr, mem.ptr) if direction == "h2d" else (mem.ptr, devm.ptr)
            iters, el = _timed(
                lambda: cp.cuda.runtime.memcpy(dst, src, nbytes, kind), lambda: self.sync(i), secs
            )
        return nbytes * iters / el / 1e9

    def p2p(self, i: int, j: int, mb: int, secs: float) -> tuple[float, bool]:
        cp = self.cp
        nbytes = mb * 2**20
        peer = bool(cp.cuda.runtime.deviceCanAccessPeer(i, j))
        with cp.cuda.Device(i):
            src = cp.cuda.alloc(nbytes)
        with cp.cuda.Device(j):
            dst = cp.cuda.alloc(nbytes)

        def sync() -> None:
            self.sync(i)
            self.sync(j)

        iters, el = _timed(lambda: cp.cuda.runtime.memcpyPeer(dst.ptr, j, src.ptr, i, nbytes), sync, secs)
        return nbytes * iters / el / 1e9, peer

    def allreduce(self, ndev: int, mb: int, secs: float) -> float:
        raise RuntimeError("NCCL all-reduce is measured with PyTorch only")

    def burn_loop(self, i: int, n: int, counter: list[float]) -> None:
        cp = self.cp
        with cp.cuda.Device(i):
            a = cp.random.standard_normal((n, n), dtype=cp.float32).astype(cp.float16)
            b = cp.random.standard_normal((n, n), dtype=cp.float32).astype(cp.float16)
            c = cp.empty((n, n), dtype=cp.float16)
            while not STOP.is_set():
                for _ in range(16):
                    cp.matmul(a, b, out=c)
                self.sync(i)
                counter[0] += 16 * 2.0 * n**3


def pick_backend(name: str, device: str) -> Any:
    """PyTorch when importable, else CuPy; the reasons each was not used go into the error."""
    whys = []
    for cand in ["torch", "cupy"] if name == "auto" else [name]:
        try:
            return TorchBackend(device) if cand == "torch" else CupyBackend(device)
        except ImportError as e:
            whys.append(f"{cand} not importable ({e})")
        except Exception as e:
            whys.append(f"{cand}: {type(e).__name__}: {e}")
    raise RuntimeError("; ".join(whys))


def _try(test: str, gpu: Any, fn: Callable[[], Any], **extra: Any) -> Any:
    try:
        return fn()
    except Exception as e:
        msg = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
        emit(event="skip", test=test, gpu=gpu, why=f"{type(e).__name__}: {msg}", **extra)
        return None
    finally:
        if test != "burn":
            try:
                be = _BACKEND[0]
                if be is not None and be.name == "torch" and be.device == "cuda":
                    be.torch.cuda.empty_cache()
            except Exception:
                pass


_BACKEND: list[Any] = [None]


def burn(be: Any, ndev: int, n: int, secs: float, interval: float) -> None:
    counters = [[0.0] for _ in range(ndev)]
    threads = [
        threading.Thread(
            target=_try, args=("burn", k, functools.partial(be.burn_loop, k, n, counters[k])), daemon=True
        )
        for k in range(ndev)
    ]
    for th in threads:
        th.start()
    t0 = time.perf_counter()
    last = [0.0] * ndev
    last_t = t0
    while not STOP.is_set():
        STOP.wait(interval)
        now = time.perf_counter()
        for k in range(ndev):
            done = counters[k][0]
            emit(event="burn", t=round(now - t0, 3), gpu=k, value=(done - last[k]) / (now - last_t) / 1e12)
            last[k] = done
        last_t = now
        if now - t0 >= secs:
            break
    STOP.set()
    for th in threads:
        th.join(timeout=30)


def _per_gpu(be: Any, a: argparse.Namespace, tests: list[str], k: int) -> None:
    """matmul per dtype, HBM bandwidth and PCIe both ways on device ``k``."""
    secs = a.matmul_s
    if "matmul" in tests:
        for dt in [x for x in a.dtypes.split(",") if x]:
            v = _try("matmul", k, functools.partial(be.matmul, k, dt, a.matmul_n, secs), dtype=dt)
            if v is not None:
                emit(event="result", test="matmul", gpu=k, dtype=dt, value=v, unit="TFLOPS")
            if STOP.is_set():
                break
    if "hbm" in tests and not STOP.is_set():
        v = _try("hbm", k, functools.partial(be.hbm, k, a.mb, secs))
        if v is not None:
            emit(event="result", test="hbm", gpu=k, value=v, unit="GB/s")
    if "pcie" in tests:
        for direction in ("h2d", "d2h"):
            if STOP.is_set():
                break
            v = _try("pcie", k, functools.partial(be.pcie, k, a.mb, secs, direction), direction=direction)
            if v is not None:
                emit(event="result", test="pcie", gpu=k, direction=direction, value=v, unit="GB/s")


def _p2p(be: Any, a: argparse.Namespace, ndev: int) -> None:
    """Peer copies over a ring of devices, or every pair (``--p2p all``, or just two devices)."""
    if ndev < 2:
        emit(event="skip", test="p2p", gpu=None, why=f"{ndev} device(s): peer copies need two GPUs")
        return
    if a.p2p == "all" or ndev == 2:
        pairs = [(i, j) for i in range(ndev) for j in range(ndev) if i != j]
    else:
        pairs = [(i, (i + 1) % ndev) for i in range(ndev)]
    for i, j in pairs:
        if STOP.is_set():
            break
        r = _try("p2p", f"{i}-{j}", functools.partial(be.p2p, i, j, a.mb, a.matmul_s / 2))
        if r is not None:
            emit(event="result", test="p2p", gpu=f"{i}-{j}", value=r[0], peer_access=r[1], unit="GB/s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--backend", choices=["auto", "torch", "cupy"], default="auto")
    ap.add_argument("--tests", default="matmul,hbm,pcie,p2p,allreduce")
    ap.add_argument("--dtypes", default="bf16,fp16,tf32,fp8")
    ap.add_argument("--matmul-n", type=int, default=8192)
    ap.add_argument("--matmul-s", type=float, default=2.0)
    ap.add_argument("--mb", type=int, default=512)
    ap.add_argument("--p2p", choices=["ring", "all"], default="ring")
    ap.add_argument("--burn", type=float, default=0.0)
    ap.add_argument("--interval", type=float, default=1.0)
    a = ap.parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _on_signal)
    try:
        be = pick_backend(a.backend, a.device)
    except RuntimeError as e:
        emit(event="nobackend", why=str(e))
        return 3
    _BACKEND[0] = be
    devs = be.devices()
    emit(
        event="backend",
        backend=be.name,
        version=be.version,
        device=a.device,
        devices=devs,
        python=sys.executable,
    )
    tests = [x for x in a.tests.split(",") if x]
    ndev = len(devs)
    for k in range(ndev):
        _per_gpu(be, a, tests, k)
    if "p2p" in tests and not STOP.is_set():
        _p2p(be, a, ndev)
    if "allreduce" in tests and not STOP.is_set():
        if ndev < 2:
            emit(event="skip", test="allreduce", gpu=None, why=f"{ndev} device(s): all-reduce needs two GPUs")
        else:
            v = _try("allreduce", None, lambda: be.allreduce(ndev, a.mb, a.matmul_s))
            if v is not None:
                emit(event="result", test="allreduce", gpu=None, value=v, unit="GB/s", ndev=ndev)
    if a.burn > 0 and not STOP.is_set():
        emit(event="burn_start", n=a.matmul_n)
        burn(be, ndev, a.matmul_n, a.burn, a.interval)
    emit(event="done", interrupted=INTERRUPTED.is_set())
    return 0


if __name__ == "__main__":
    sys.exit(main())
