"""lm-sensors and hwmon: ``sensors -j`` JSON, plain ``sensors`` text, and the live hwmon sysfs tree.

``sensors -j`` prints ``{chip: {"Adapter": ..., label: {"temp1_input": 45.0, "temp1_crit": 100.0}}}``;
3.5.0 printed a stray comma (fixed in 3.6.0), so JSON is read leniently. hwmon sysfs is read directly
(millidegrees, millivolts, microwatts) into the same shape, so one parser serves both.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from gpuclinic import lazyre
from gpuclinic.facts import room as R
from gpuclinic.sources import sniffgates
from gpuclinic.sources.bmc import salvage
from gpuclinic.sources.bmc.common import finish, make_sensor

_PREFIX = lazyre.compile(r"^(temp|fan|in|curr|power)(\d+)_(\w+)$")
_UNIT = {"temp": "C", "fan": "RPM", "in": "V", "curr": "A", "power": "W"}
_THR = {"max": "unc", "crit": "ucr", "emergency": "unr", "min": "lnc", "lcrit": "lcr", "cap": "ucr"}
_CHIP = lazyre.compile(r"^[\w.]+(?:-[\w.]+){1,3}$")
_TEXT_ROW = lazyre.compile(r"^([^:]{1,40}):\s+([-+]?\d+(?:\.\d+)?)\s*(°C|Â°C|C|RPM|V|mV|A|W|mW)\b(.*)$")
_TEXT_THR = lazyre.compile(r"(\w+)\s*=\s*([-+]?\d+(?:\.\d+)?)")


def _loads_lenient(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        pass
    fixed = re.sub(r",(\s*[}\]])", r"\1", text)  # lm-sensors 3.5.0 stray comma
    fixed = re.sub(r"^\s*\([^)]*\)\s*,?\s*$", "", fixed, flags=re.M)  # write-only subfeature tokens
    return json.loads(fixed)


def claims_json(text: str) -> bool:
    head = text[:4000]
    return (
        head.lstrip().startswith("{")
        and sniffgates.SENSORS_JSON[0] in head
        and bool(re.search(r'"(temp|fan|in|power)\d+_input"', head))
    )


def _feature(chip: str, label: str, subs: dict[str, Any], source: str) -> R.RoomSensor | None:
    reading: float | None = None
    unit: str | None = None
    thr: dict[str, float] = {}
    alarm = ""
    for key, val in subs.items():
        m = _PREFIX.match(key)
        if not m or isinstance(val, bool) or not isinstance(val, (int, float)):
            continue
        unit = _UNIT[m.group(1)]
        sub = m.group(3)
        if sub in ("input", "average"):
            reading = float(val)
        elif sub in _THR and (unit != "C" or val > -200):
            thr[_THR[sub]] = float(val)
        elif sub.endswith("alarm") and val:
            alarm = "cr" if "crit" in sub or sub == "alarm" and unit == "RPM" else alarm or "nc"
        elif sub == "fault" and val:
            alarm = "cr"
    if reading is None and unit is None:
        return None
    if unit == "RPM" and "lnc" in thr:  # fanN_min is the lower limit the chip alarms on
        thr["lcr"] = thr.pop("lnc")
    if unit == "RPM" and not reading and not thr.get("lcr"):
        # 0 RPM with no minimum set: an empty fan header on a Super I/O chip, not a stopped fan
        sen = make_sensor(label, reading, unit, "ok", source=source, thresholds=thr, entity=chip)
        sen.absent = True
        return sen
    status = alarm or "ok"
    sen = make_sensor(
        label,
        reading,
        unit,
        status,
        source=source,
        thresholds=thr,
        entity=chip,
        sensor_type="Temperature" if unit == "C" else None,
    )
    if unit == "C" and reading is not None and (reading <= -60 or reading >= 127):
        sen.absent = True  # -128/+127 °C: an unconnected thermistor input, whatever its ALARM bit says
    return sen


def parse_obj(data: dict[str, Any], source: str) -> R.RoomFacts:
    room = R.RoomFacts()
    for chip, feats in data.items():
        if not isinstance(feats, dict):
            continue
        sens: list[R.RoomSensor] = []
        for label, subs in feats.items():
            if label == "Adapter" or not isinstance(subs, dict):
                continue
            s = _feature(chip, label, subs, source)
            if s is not None:
                if (
                    s.kind == R.TEMPERATURE
                    and s.role is None
                    and chip.startswith(("coretemp", "k10temp", "zenpower"))
                ):
                    s.role = "cpu"
                sens.append(s)
        if _garbage_limits(sens):
            _drop_limits(sens)
        room.sensors += sens
    if room.sensors:
        room.add_source(source)
        finish(room, source)
    return room


def _garbage_limits(sens: list[R.RoomSensor]) -> bool:
    """A Super I/O chip whose limits were never set by its board's config: a lower limit above the upper
    one (``min = +2.11 V, max = +1.02 V``) or a high temperature limit below -50 °C.  Its ALARM bits then
    say nothing about the hardware (every input alarms)."""
    for x in sens:
        lo = x.thresholds.get("lnc", x.thresholds.get("lcr"))
        hi = x.thresholds.get("unc", x.thresholds.get("ucr"))
        if x.kind != R.TEMPERATURE and lo is not None and hi is not None and 0 < hi < lo:
            return True
        if x.kind == R.TEMPERATURE and hi is not None and hi < -50:
            return True
    return False


def _drop_limits(sens: list[R.RoomSensor]) -> None:
    for x in sens:
        x.thresholds = {}
        x.status, x.level = "ok", "ok"
        if x.kind == R.FAN and not x.reading:
            x.absent = True  # 0 RPM with no trustworthy minimum: an empty fan header


def parse_json(text: str) -> R.RoomFacts:
    why = None
    try:
        data = _loads_lenient(text)
    except ValueError:  # cut off: the chips complete before the cut (ValueError when none is)
        data, why = salvage.loads_partial(re.sub(r",(\s*[}\]])", r"\1", text))
    if not isinstance(data, dict):
        return R.RoomFacts()
    room = parse_obj(data, "sensors -j")
    if why:
        room.partial.append(f"sensors -j {why}")
    return room


_RAW_SUB = lazyre.compile(r"^\s+((?:temp|fan|in|curr|power)\d+_\w+):\s*([-+]?\d+(?:\.\d+)?)\s*$")


def claims_raw(text: str) -> bool:
    """``sensors -u``: chip, ``Adapter:``, ``Label:`` then indented ``temp1_input: 45.000`` lines."""
    if sniffgates.SENSORS_TEXT[0] not in text:  # ("Adapter:": a line below needs it; cheaper than the split)
        return False
    lines = text.splitlines()[:300]
    return (
        any(ln.startswith("Adapter:") for ln in lines) and sum(1 for ln in lines if _RAW_SUB.match(ln)) >= 1
    )


def parse_raw(text: str) -> R.RoomFacts:
    data: dict[str, dict[str, Any]] = {}
    chip: str | None = None
    label: str | None = None
    for line in text.splitlines():
        s = line.rstrip()
        if not s:
            continue
        m = _RAW_SUB.match(s)
        if m and chip is not None and label is not None:
            data[chip].setdefault(label, {})[m.group(1)] = float(m.group(2))
        elif not s[0].isspace() and s.endswith(":") and chip is not None:
            label = s[:-1].strip()
        elif _CHIP.match(s.strip()) and ":" not in s:
            chip, label = s.strip(), None
            data.setdefault(chip, {})
    return parse_obj(data, "sensors -u")


def claims_text(text: str) -> bool:
    if sniffgates.SENSORS_TEXT[0] not in text:  # ("Adapter:": a line below needs it; cheaper than the split)
        return False
    lines = text.splitlines()[:200]
    return (
        any(ln.startswith("Adapter:") for ln in lines) and sum(1 for ln in lines if _TEXT_ROW.match(ln)) >= 1
    )


def parse_text(text: str) -> R.RoomFacts:
    """Plain ``sensors`` output: chip line, ``Adapter:`` line, then ``label: +45.0°C (high = ..., crit =
    ...)``."""
    data: dict[str, dict[str, Any]] = {}
    chip: str | None = None
    for i, line in enumerate(text.splitlines()):
        s = line.rstrip()
        if _CHIP.match(s.strip()) and ":" not in s:
            chip = s.strip()
            data.setdefault(chip, {})
            continue
        m = _TEXT_ROW.match(s.strip())
        if not m or chip is None:
            continue
        label, val, unit, rest = m.group(1).strip(), float(m.group(2)), m.group(3), m.group(4)
        prefix = {"RPM": "fan", "V": "in", "mV": "in", "A": "curr", "W": "power", "mW": "power"}.get(
            unit, "temp"
        )
        if unit in ("mV", "mW"):
            val /= 1000
        subs: dict[str, Any] = {f"{prefix}1_input": val}
        for k, v in _TEXT_THR.findall(rest):
            k = {"high": "max", "crit": "crit", "low": "min", "min": "min", "max": "max", "hyst": "hyst"}.get(
                k.lower(), k
            )
            subs[f"{prefix}1_{k}"] = float(v) / (1000 if unit in ("mV", "mW") else 1)
        if "ALARM" in rest:
            subs[f"{prefix}1_{'crit_' if 'CRIT' in rest else ''}alarm"] = 1
        key = label if label not in data[chip] else f"{label} #{i}"
        data[chip][key] = subs
    return parse_obj(data, "sensors")


# ------------------------------------------------------------------------------------------ hwmon sysfs


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return fh.read(256).strip()
    except OSError:  # unreadable attributes (EIO from a broken chip) are skipped, like `sensors` does
        return None


_SCALE = {"temp": 1000.0, "in": 1000.0, "curr": 1000.0, "fan": 1.0, "power": 1e6}


def read_hwmon(root: str = "/sys/class/hwmon") -> R.RoomFacts:
    """The hwmon tree as ``sensors -j`` would print it (labels from ``*_label`` where the driver
    gives them)."""
    data: dict[str, dict[str, Any]] = {}
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return R.RoomFacts()
    for ent in entries[:64]:
        d = os.path.join(root, ent)
        name = _read(os.path.join(d, "name")) or ent
        chip = f"{name}-{ent}"
        feats: dict[str, dict[str, Any]] = {}
        try:
            files = sorted(os.listdir(d))[:512]
        except OSError:
            continue
        for f in files:
            m = _PREFIX.match(f)
            if not m or m.group(3) == "label":
                continue
            raw = _read(os.path.join(d, f))
            try:
                val = float(raw) if raw is not None else None
            except ValueError:
                val = None
            if val is None:
                continue
            base = f"{m.group(1)}{m.group(2)}"
            label = _read(os.path.join(d, f"{base}_label")) or base
            scale = 1.0 if m.group(3).endswith(("alarm", "fault")) else _SCALE[m.group(1)]
            feats.setdefault(label, {})[f] = val / scale
        if feats:
            data[chip] = feats
    room = parse_obj(data, "hwmon")
    room.bmc = room.bmc or None
    return room
