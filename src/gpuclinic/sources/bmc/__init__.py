"""The server room as the BMC and hwmon see it: inlet air, fans, power supplies and the event log.

``collect(snap, opts)`` is the live source (run by :mod:`gpuclinic.collect`); ``formats`` holds the
saved-output recognisers used by ``doctor --from``. A node without a reachable BMC gets a "could not
check" line, never an error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuclinic.facts.room import RoomFacts
from gpuclinic.facts.snapshot import Snapshot

if TYPE_CHECKING:
    from gpuclinic.collect import CollectOptions
    from gpuclinic.sources.bmc.live import BmcOptions

# The live readers (ssl, subprocess) load when a live source runs: reading saved BMC output
# (``formats``, as ``explain`` and ``doctor --from`` do) imports this package without them.

def _which(name: str) -> str | None:
    import shutil  # (with the live readers: not at import)

    return shutil.which(name)


WHAT_IPMI = "the BMC over IPMI (inlet air, fans, power supplies, event log)"
WHAT_REDFISH = "the BMC over Redfish (inlet air, fans, power supplies, event log)"


def read_room(opts: BmcOptions, snap: Snapshot) -> RoomFacts:
    """Every room source ``opts`` allows; each one that cannot read becomes a skipped line on ``snap``."""
    from gpuclinic.sources.bmc.live import BmcError, in_band_device, read_freeipmi, read_redfish
    from gpuclinic.sources.bmc.lmsensors import read_hwmon

    room = RoomFacts()
    if opts.redfish:
        try:
            part, notes = read_redfish(opts)
            room.merge(part)
            snap.notes.extend(f"redfish: {n}" for n in notes)
        except BmcError as e:
            snap.skip(WHAT_REDFISH, opts.redact(str(e)))
    if opts.host:
        _ipmi(opts, snap, room)
    elif opts.in_band and not opts.redfish:
        dev = in_band_device()
        if dev is None:
            snap.skip(
                WHAT_IPMI,
                "no in-band IPMI device (/dev/ipmi0): load ipmi_devintf and ipmi_si, or give "
                "--bmc HOST or --redfish URL",
            )
        elif _which("ipmitool"):
            _ipmi(opts, snap, room)
        elif _which("ipmi-sensors"):
            try:
                part, notes = read_freeipmi(opts)
                room.merge(part)
                snap.notes.extend(notes)
            except BmcError as e:
                snap.skip(WHAT_IPMI, opts.redact(str(e)))
        else:
            snap.skip(WHAT_IPMI, f"{dev} exists but neither ipmitool nor FreeIPMI is installed")
    if opts.hwmon:
        hw = read_hwmon(opts.hwmon_root)
        if hw.sensors:
            room.merge(hw)
    if room.bmc is None and (opts.host or opts.redfish):
        room.bmc = opts.where() if opts.host else opts.redfish
    return room


def _ipmi(opts: BmcOptions, snap: Snapshot, room: RoomFacts) -> None:
    from gpuclinic.sources.bmc.live import BmcError, read_ipmitool

    try:
        part, notes = read_ipmitool(opts)
        room.merge(part)
        snap.notes.extend(opts.redact(n) for n in notes)
    except BmcError as e:
        snap.skip(WHAT_IPMI, opts.redact(str(e)))


def collect(snap: Snapshot, opts: CollectOptions) -> None:
    from gpuclinic.sources.bmc.live import BmcOptions

    bmc = getattr(opts, "bmc", None) or BmcOptions()
    room = read_room(bmc, snap)
    if room.sensors or room.psus or room.events_read or room.power_consumed_w is not None:
        snap.room = room
