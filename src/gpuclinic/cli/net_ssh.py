"""``gpuclinic net --ssh HOST``: probe one SSH path (handshake, RTT, one vs eight streams) and the ssh setup.

Why: "syncing to the server is slow" is usually one of three things that look alike from a
laptop: a per-connection cap (many streams fix it), a slow link (nothing but compression fixes
it), or the ssh setup (no connection sharing, a slow cipher, compression on a fast link, an MTU
black hole).  This measures which, with the same probes ``gpuclinic sync`` plans with.
"""

from __future__ import annotations

import json

import click


def run_ssh_probe(host: str, rsh: str | None, direction: str, as_json: bool) -> int:
    """Print the probe and the diagnosis; exit 0 healthy, 1 when a finding slows transfers."""
    from gpuclinic.transfer.sync import MiB, Ssh
    from gpuclinic.transfer.sync_probe import choose_streams, diagnose_ssh, probe_link

    ssh = Ssh(host, rsh)
    cfg = ssh.config()
    pr = probe_link(ssh, direction)
    streams, why = choose_streams(pr, 16)
    notes = diagnose_ssh(cfg, pr)
    gain = pr.multi_stream / pr.one_stream if pr.one_stream else 0.0
    capped = gain >= 1.5
    doc = {
        "host": host,
        "target": f"{cfg.get('user', '?')}@{cfg.get('hostname', host)}:{cfg.get('port', '22')}",
        "direction": direction,
        "probe": pr.to_dict(),
        "gain": round(gain, 2),
        "per_connection_cap": capped,
        "streams": streams,
        "stream_reason": why,
        "notes": notes,
        "ssh_config": {
            k: cfg.get(k)
            for k in (
                "hostname",
                "port",
                "user",
                "ciphers",
                "compression",
                "controlmaster",
                "controlpath",
                "controlpersist",
                "proxyjump",
                "ipqos",
            )
        },
    }
    if as_json:
        click.echo(json.dumps(doc, sort_keys=True))
    else:
        click.echo(f"ssh {host} -> {doc['target']} ({direction})")
        click.echo(f"  handshake {pr.handshake_s:.2f} s, RTT {pr.rtt_s * 1000:.0f} ms")
        click.echo(
            f"  1 stream {pr.one_stream / MiB:.1f} MiB/s, {pr.multi_n} streams {pr.multi_stream / MiB:.1f} "
            f"MiB/s ({gain:.1f}x)"
        )
        if capped:
            click.echo(f"  each connection is capped: `gpuclinic sync` would use {streams} streams ({why})")
        else:
            click.echo(f"  the link, not the connection, is the limit ({why})")
        for n in notes:
            click.echo(f"  - {n}")
    return 1 if notes or capped else 0
