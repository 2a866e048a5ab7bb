"""The software around the GPU as people paste it: container-hook ldcache errors, the gpu-operator driver
container without kernel packages, failing GPU operand pods, DCGM's profiling module, Slurm's
`Kill task failed`, a memcg OOM report cut before its kill line.  Each is named by explain and by
doctor --from (which refused these texts as "not recognised" before)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuclinic.diagnose import diagnose
from gpuclinic.explain import explain_text
from gpuclinic.sources import evidence

CASES = [
    (
        "docker: Error response from daemon: ... Running hook #1:: error running hook: exit status 1, "
        "stdout: , stderr: nvidia-container-cli: ldcache error: open failed: /sbin/ldconfig.real: "
        "no such file or directory: unknown.",
        "error.container_cli.ldcache_error",
        "critical",
    ),
    (
        "E0711 07:13:39.552177 1 nvc_ldcache.c:403] could not start /usr/sbin/ldconfig: "
        "mount operation failed: /dev: operation not permitted",
        "error.container_cli.ldcache_error",
        "critical",
    ),
    (
        "Resolving Linux kernel version...\nUnloading NVIDIA driver kernel modules...\n"
        "Could not resolve Linux kernel version\n",
        "error.driver_container.kernel_headers",
        "critical",
    ),
    (
        "**Error: Unable to find a match: kernel-devel-4.18.0-240.22.1.el8_3.x86_64**",
        "error.driver_container.kernel_headers",
        "critical",
    ),
    (
        "NAME                                       READY   STATUS             RESTARTS   AGE\n"
        "nvidia-driver-daemonset-cs2sr              0/1     CrashLoopBackOff   14         37m\n",
        "error.k8s.gpu_operand_failing",
        "warning",
    ),
    (
        'time="2023-01-05T16:23:09Z" level=fatal msg="Failed to watch metrics: Error watching fields: The '
        'third-party Profiling module returned an unrecoverable error"',
        "error.dcgm.profiling_module_error",
        "warning",
    ),
    ("Kill task failed root 2024-01-25T15:12:23 ip-10-0-1-23", "error.slurm.kill_task_failed", "warning"),
    (
        "[2020-12-14T09:44:56.002] [63532.0] error: *** STEP 63532.0 STEPD TERMINATED ON cn106 AT "
        "2020-12-14T09:44:56 DUE TO JOB NOT ENDING WITH SIGNALS ***",
        "error.slurm.kill_task_failed",
        "warning",
    ),
    (
        "2023-12-04T10:49:30.127Z In(05) vcpu-5 - Guest: <6>[39291577.009360] Memory cgroup stats for "
        "/kubepods/burstable/podfe3f7a38: cache:0KB rss:613460KB\n"
        "2023-12-04T10:49:30.127Z In(05) vcpu-5 - Guest: <6>[39291577.009363] "
        "Tasks state (memory values in pages):\n",
        "error.host.oom_killer",
        "critical",
    ),
    (
        "RuntimeError: unable to write to file </torch_31911_952036340_6686>: No space left on device (28)",
        "error.torch.shm_full",
        "warning",
    ),
    (
        "dmesg reported\n````\nnvidia: version magic '5.4.18-100.fc30.x86_64 SMP mod_unload ' should be "
        "'5.4.18-200.fc31.x86_64 SMP mod_unload '\n````",
        "error.nvidia_module.vermagic",
        "critical",
    ),
    (
        "ERROR: Unable to load the kernel module 'nvidia.ko'.  This happens most frequently when this kernel "
        "module was built",
        "error.nvidia_installer.module_load_failed",
        "critical",
    ),
    (
        "ERRO[0000] failed to generate CDI spec: failed to create device CDI specs: failed to generate CDI "
        "edits for GPU devices: error getting GPU device minor number: Not Supported",
        "error.cdi.spec_error",
        "warning",
    ),
    (
        "docker: Error response from daemon: ... failed to inject CDI devices: unresolvable CDI de          "
        "vices runtime.nvidia.com/gpu=all: unknown",
        "container.no_gpu_visible",
        "warning",
    ),
    (
        "loading NVML\nFailed to start nvml with error:  could not load NVML library\n",
        "error.nvml.generic",
        "warning",
    ),
    (
        "REASON               USER      TIMESTAMP           NODELIST\n"
        "gres/gpu count repor slurm     2026-04-14T06:39:53 slinky-0\n",
        "gpu.missing",
        "critical",
    ),
    (
        "Anything Else: Reason=Node unexpectedly rebooted [slurm@2022-07-23T15:31:00]",
        "error.slurm.node_rebooted",
        "warning",
    ),
    (
        'docker: Error response from daemon: exec: "nvidia-container-runtime-hook": executable file '
        "not found in $PATH.",
        "error.container_runtime.hook_missing",
        "critical",
    ),
    (
        "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox runtime: no "
        "runtime for \u201cnvidia\u201d is configured",
        "error.k8s.nvidia_runtime_not_configured",
        "warning",
    ),
    (
        "stderr: nvidia-container-cli: container error: cgroup subsystem devices not found: unknown.",
        "error.container_cli.cgroup_devices",
        "critical",
    ),
    (
        "nvidia-container-cli: detection error: nvml error: unknown error",
        "error.container_cli.detection_error",
        "critical",
    ),
]


@pytest.mark.parametrize(("text", "code", "severity"), CASES)
def test_named_by_explain_and_doctor(tmp_path: Path, text: str, code: str, severity: str) -> None:
    got = {f.code: f.severity.name.lower() for f in explain_text(text, "paste").findings}
    assert got.get(code) == severity, got
    p = tmp_path / "paste.txt"
    p.write_text(text + "\n")
    got = {f.code: f.severity.name.lower() for f in diagnose(evidence.load_evidence([str(p)])).findings}
    assert got.get(code) == severity, got


def test_running_operand_pods_are_not_a_fault() -> None:
    text = (
        "NAMESPACE      NAME                                       READY   STATUS    RESTARTS   AGE\n"
        "gpu-operator   nvidia-driver-daemonset-v7v74              1/1     Running   0          12m\n"
        "gpu-operator   nvidia-device-plugin-daemonset-ktdrb       1/1     Running   0          12m\n"
    )
    assert not [f for f in explain_text(text, "paste").findings if f.code.startswith("error.k8s")]


def test_shm_full_replaces_the_generic_no_space_finding() -> None:
    codes = {f.code for f in explain_text(CASES[9][0], "paste").findings}
    assert "error.torch.shm_full" in codes and "error.python.no_space_left" not in codes


def test_a_dmesg_vermagic_line_is_one_kernel_module_finding(tmp_path: Path) -> None:
    """The kernel-log reader names it (built for another kernel); the prose signature gives way."""
    p = tmp_path / "dmesg.txt"
    p.write_text(
        "[  100.100000] nvidia: version magic '5.4.18-100.fc30.x86_64 SMP mod_unload ' should be "
        "'5.4.18-200.fc31.x86_64 SMP mod_unload '\n"
    )
    codes = {f.code: f.severity.name.lower() for f in diagnose(evidence.load_evidence([str(p)])).findings}
    assert codes == {"driver.kernel_module": "critical"}


def test_a_detection_error_naming_a_version_mismatch_is_the_mismatch_finding() -> None:
    text = "nvidia-container-cli: detection error: nvml error: driver/library version mismatch: unknown"
    codes = {f.code for f in explain_text(text, "paste").findings}
    assert "driver.library_mismatch" in codes and "error.container_cli.detection_error" not in codes


@pytest.mark.parametrize(
    "text",
    [
        "    Found GPU0 GeForce GTX 660 Ti which is of cuda capability 3.0.\n"
        "    PyTorch no longer supports this GPU because it is too old.\n\n"
        "RuntimeError: CUDA error: no kernel image is available for execution on the device\n",
        "     Ignoring gpu device (device: 0, name: GRID K520, pci bus id: 0000:00:03.0) \n"
        "    with Cuda compute capability 3.0. The minimum required Cuda capability is 3.5.\n",
    ],
)
def test_a_gpu_too_old_for_the_framework_build_is_one_finding(text: str) -> None:
    codes = {f.code: f.severity.name.lower() for f in explain_text(text, "paste").findings}
    assert codes == {"error.framework.gpu_too_old": "critical"}, codes
