"""``gpuclinic k8s npd | condition | evidence``: GPU health for Kubernetes nodes."""

from __future__ import annotations

import json
import os
import socket
import time
from typing import TYPE_CHECKING, Any

import click

from gpuclinic.cli.params import duration_option, file_option
from gpuclinic.errors import EXIT_COULD_NOT_RUN, EXIT_USAGE, GpuclinicError, InputError

if TYPE_CHECKING:
    from gpuclinic.diagnose import Report

_SCENARIO = click.option(
    "--scenario", metavar="NAME", help="Judge a simulated node (see `doctor --list-scenarios`)."
)


def _report(scenario: str | None) -> Report:
    from gpuclinic.slurm.health import run_doctor

    return run_doctor(scenario)


@click.group("k8s")
def k8s() -> None:
    """Kubernetes: node-problem-detector plugin, GPUProblem condition and taint, device-plugin evidence."""


@k8s.command("npd")
@_SCENARIO
@click.option(
    "--fail-on",
    type=click.Choice(["drain", "warning"]),
    default="drain",
    show_default=True,
    help="Lowest verdict reported as a problem (NonOK, exit 1).",
)
@click.option(
    "--max-output-length",
    type=click.IntRange(min=16, max=4096),
    default=None,
    metavar="BYTES",
    help="Cut the message to this many bytes (NPD's max_output_length, default 80).",
)
def npd(scenario: str | None, fail_on: str, max_output_length: int | None) -> int:
    """node-problem-detector custom plugin: one line on stdout; exit 0 OK, 1 problem, 2 could not check.

    Use with the shipped config gpuclinic/k8s/deploy/npd-gpuclinic.json (condition GPUProblem).
    """
    from gpuclinic.k8s.npd import plugin_result

    try:
        res = plugin_result(_report(scenario), fail_on=fail_on, limit=max_output_length)
    except InputError:
        raise
    except Exception as e:  # the contract: a failed check is Unknown (2), never a traceback or "problem"
        res = plugin_result(None, error=f"{type(e).__name__}: {e}", limit=max_output_length)
    click.echo(res.message)
    return res.status


@k8s.command("condition")
@_SCENARIO
@click.option(
    "--node",
    metavar="NAME",
    envvar="NODE_NAME",
    help="Node to patch (env NODE_NAME, set it from the downward API spec.nodeName).",
)
@click.option(
    "--taint", is_flag=True, help="Also add/remove the NoSchedule taint gpuclinic.io/gpu-problem=<code>."
)
@click.option(
    "--kubeconfig",
    type=click.Path(exists=True, dir_okay=False),
    metavar="FILE",
    help="kubeconfig (default: in-cluster service account, else ~/.kube/config).",
)
@click.option(
    "--dry-run",
    "dry_run",
    type=click.Choice(["none", "client", "server"]),
    default="none",
    show_default=True,
    help="client: print the patches, contact nothing; server: API dry run.",
)
@duration_option("--every", help="Repeat this often (e.g. 5m) instead of once (DaemonSet mode).")
@click.option("--fail-on", type=click.Choice(["drain", "warning"]), default="drain", show_default=True)
def condition(
    scenario: str | None,
    node: str | None,
    taint: bool,
    kubeconfig: str | None,
    dry_run: str,
    every: str | None,
    fail_on: str,
) -> int:
    """Set this node's GPUProblem condition (and with --taint a NoSchedule taint) directly, without NPD.

    Needs RBAC: get+patch on nodes/status (and get+patch on nodes for --taint); see k8s/deploy/rbac.yaml.
    """
    from gpuclinic.k8s.node import apply, condition_patch, taints_after
    from gpuclinic.k8s.npd import plugin_result

    interval = None
    if every:
        from gpuclinic.watch.config import parse_duration

        try:
            interval = parse_duration(every, what="--every")
        except InputError as e:
            raise InputError(str(e), exit_code=EXIT_USAGE) from None
    name = node or socket.gethostname()
    while True:
        try:
            res = plugin_result(_report(scenario), fail_on=fail_on)
        except InputError:
            raise
        except Exception as e:
            res = plugin_result(None, error=f"{type(e).__name__}: {e}")
        if dry_run == "client":
            out: dict[str, Any] = {"node": name, "condition_patch": condition_patch(res)}
            if taint:
                out["taints_if_node_has_none"] = taints_after(res, [])
            click.echo(json.dumps(out, indent=1))
        else:
            try:
                done = apply(name, res, taint=taint, kubeconfig=kubeconfig, dry_run=dry_run == "server")
                what = "" if done.taints is None else f"; taints now {[t['key'] for t in done.taints]}"
                click.echo(
                    f"gpuclinic: node {name}: "
                    f"GPUProblem={done.condition['status']['conditions'][0]['status']}"
                    f" ({res.message}){what}",
                    err=True,
                )
            except GpuclinicError as e:
                if interval is None:
                    raise
                click.echo(f"gpuclinic: error: {e}", err=True)
        if interval is None:
            return {0: 0, 1: 2}.get(res.status, EXIT_COULD_NOT_RUN)
        time.sleep(interval)


@k8s.command("evidence")
@_SCENARIO
@file_option("--node-json", help="The node object: `kubectl get node NAME -o json > node.json`.")
@file_option(
    "--device-plugin-config",
    help="Device-plugin config YAML, or the GPU Operator ConfigMap of them.",
)
@click.option("--config-name", metavar="KEY", help="Which key of the ConfigMap applies to this node.")
@click.option("--node", metavar="NAME", help="Read the node from the API instead (needs get on nodes).")
@click.option(
    "--config-map",
    metavar="NAMESPACE/NAME",
    help="Read the device-plugin ConfigMap from the API (e.g. gpu-operator/time-slicing-config-all).",
)
@click.option("--kubeconfig", type=click.Path(exists=True, dir_okay=False), metavar="FILE")
@click.option("--json", "as_json", is_flag=True)
@click.option("--markdown", "as_markdown", is_flag=True)
def evidence(
    scenario: str | None,
    node_json: str | None,
    device_plugin_config: str | None,
    config_name: str | None,
    node: str | None,
    config_map: str | None,
    kubeconfig: str | None,
    as_json: bool,
    as_markdown: bool,
) -> int:
    """The doctor, plus what Kubernetes makes of this node's GPUs: sharing (time-slicing/MPS), MIG strategy,
    nvidia.com/gpu capacity and allocatable against the GPUs the doctor sees."""
    from gpuclinic.cli.doctor import emit, output_format
    from gpuclinic.diagnose import build_report
    from gpuclinic.k8s.evidence import (
        load_device_plugin_config,
        load_node,
        node_findings,
        parse_device_plugin_config,
    )

    fmt = output_format(as_json, as_markdown)
    for opt, p in (("--node-json", node_json), ("--device-plugin-config", device_plugin_config)):
        if p and not os.path.isfile(p):
            raise InputError(f"{opt} {p}: no such file", exit_code=EXIT_USAGE)
    if node and node_json or config_map and device_plugin_config:
        raise InputError(
            "read each object either from a file or from the API, not both", exit_code=EXIT_USAGE
        )
    if not (node_json or device_plugin_config or node or config_map):
        raise InputError(
            "give --node-json FILE / --node NAME and/or --device-plugin-config FILE / --config-map NS/NAME",
            exit_code=EXIT_USAGE,
        )
    node_obj = load_node(node_json) if node_json else None
    sharing = load_device_plugin_config(device_plugin_config, config_name) if device_plugin_config else None
    if node or config_map:
        from gpuclinic.k8s.node import read_objects

        api_node, api_cm = read_objects(node, config_map, kubeconfig)
        node_obj = api_node or node_obj
        if api_cm is not None:
            sharing = parse_device_plugin_config(api_cm, name=config_name)
    base = _report(scenario)
    physical = len(base.snapshot.gpus) if base.snapshot.gpus else None
    extra = node_findings(node_obj, sharing, physical)
    report = build_report(
        base.snapshot, list(base.findings) + extra, list(base.skipped), command="k8s evidence"
    )
    emit(report, fmt)
    return report.exit_code
