"""gpuclinic capture bundles (tar.gz, or the directory one was extracted to) as evidence.

``snapshot.json`` is the live read; the raw outputs under ``raw/`` fill only what it lacked (no NVML
bindings, no log access), so a bundle never doubles its own facts.
"""

from __future__ import annotations

import json
import os
import tarfile
from collections.abc import Callable

from gpuclinic.errors import InputError
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.sources.evidence import MAX_BUNDLE_MEMBER, _decode
from gpuclinic.sources.evidence_text import SAMPLE_BYTES, _apply_json, _apply_text, detect
from gpuclinic.sources.merge import _Unrecognised


def apply_bundle(snap: Snapshot, path: str) -> None:
    """Read a ``gpuclinic capture`` bundle without extracting it to disk."""
    try:
        tf = tarfile.open(path, mode="r:*")
    except (tarfile.TarError, OSError) as e:
        raise _Unrecognised(f"tar archive could not be read ({e})") from None
    with tf:
        members = {}
        try:
            for m in tf:
                if m.isfile() and 0 <= m.size <= MAX_BUNDLE_MEMBER:
                    members[m.name.lstrip("./")] = m
        except (tarfile.TarError, OSError, EOFError) as e:
            raise _Unrecognised(f"tar archive is truncated or corrupt ({e})") from None

        def read(name: str) -> str | None:
            m = members.get(name)
            if m is None:
                return None
            fh = tf.extractfile(m)
            if fh is None:
                return None
            try:
                return _decode(fh.read())
            except (tarfile.TarError, OSError, EOFError) as e:
                raise _Unrecognised(f"tar member {name} is corrupt ({e})") from None

        apply_bundle_members(snap, path, sorted(members), read)


def apply_bundle_dir(snap: Snapshot, path: str) -> None:
    """An extracted capture bundle: read like the tar.gz, so raw outputs do not double the snapshot."""
    names: list[str] = []
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(dirs)
        for f in sorted(files):
            names.append(os.path.relpath(os.path.join(root, f), path).replace(os.sep, "/"))

    def read(name: str) -> str | None:
        full = os.path.join(path, name)
        try:
            if os.path.getsize(full) > MAX_BUNDLE_MEMBER:
                return None
            with open(full, "rb") as fh:
                return _decode(fh.read())
        except OSError:
            return None

    apply_bundle_members(snap, path, names, read)


def _manifest_notes(snap: Snapshot, path: str, manifest: str | None) -> None:
    """What the capture itself could not collect, as notes on the snapshot."""
    if manifest:
        try:
            man = json.loads(manifest)
            for f in man.get("failed", []) if isinstance(man, dict) else []:
                if isinstance(f, dict) and f.get("what"):
                    snap.notes.append(f"capture could not collect {f.get('what')}: {f.get('why')}")
        except ValueError:
            snap.notes.append(f"{path}: manifest.json is not valid JSON")


def apply_bundle_members(
    snap: Snapshot, path: str, names: list[str], read: Callable[[str], str | None]
) -> None:
    snap_json = read("snapshot.json")
    if snap_json is not None:
        had_gpus, had_log, had_pci = bool(snap.gpus), snap.kernel_log_read, snap.pci_read
        _apply_json(snap, snap_json, f"{path}:snapshot.json")
        # The raw outputs fill what the live read could not (no NVML bindings, no log access).
        wanted = (
            {"smi_text", "smi_xml", "smi_table", "smi_csv"}
            if not snap.gpus or snap.gpus and not had_gpus and all(g.name is None for g in snap.gpus)
            else set()
        )
        if not snap.kernel_log_read and not had_log:
            wanted.add("kernel_log")
        if not snap.pci_read and not had_pci:
            wanted.add("lspci")
        for name in names:
            if not wanted or not name.startswith("raw/"):
                continue
            text = read(name)
            kind = detect(text[:SAMPLE_BYTES]) if text else None
            if kind in wanted and text is not None:
                try:
                    _apply_text(snap, kind, text, f"{path}:{name}")
                except (_Unrecognised, InputError) as e:
                    snap.skip(f"{path}:{name}", str(e))
                if kind.startswith("smi_") and snap.gpus:
                    wanted -= {"smi_text", "smi_xml", "smi_table", "smi_csv"}
        _manifest_notes(snap, path, read("manifest.json"))
        return
    used = 0
    for name in names:
        if not name.startswith("raw/"):
            continue
        text = read(name)
        if not text:
            continue
        kind = detect(text[:SAMPLE_BYTES])
        if kind is None:
            continue
        try:
            _apply_text(snap, kind, text, f"{path}:{name}")
            used += 1
        except (_Unrecognised, InputError) as e:
            snap.skip(f"{path}:{name}", str(e))
    if not used:
        raise _Unrecognised(
            "tar archive is not a gpuclinic capture (no snapshot.json or readable raw/ outputs)"
        )
