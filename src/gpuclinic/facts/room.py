"""Room facts: what the BMC and the host's own sensors say about air, fans, power supplies and events.

One shape for every source (``ipmitool``, FreeIPMI, Redfish, ``sensors -j``/hwmon), so the room checks
never care where a reading came from. Every field may be unknown: a BMC that gives no thresholds, a
Redfish service without power data, a saved ``sdr elist`` without the SEL.
"""

from __future__ import annotations

import re

from gpuclinic.record import field, record

# Sensor kinds (``RoomSensor.kind``)
TEMPERATURE = "temperature"
FAN = "fan"
VOLTAGE = "voltage"
CURRENT = "current"
POWER = "power"
PSU = "psu"  # a power-supply status (discrete) sensor
POWER_UNIT = "power_unit"  # power unit / redundancy sensors
OTHER = "other"
# ComponentHealth.kind of an entry of the service's own condition list (Redfish ServiceConditions)
CONDITION = "Condition"
# the source suffix of a BmcEvent read from a discrete sensor's asserted state (sdr), not from a log
STATE_SOURCE = " (sensor state now)"



def name_key(text: str) -> str:
    """A part's name as the BMC's documents compare it: ASCII letters and digits, lower case ("CPU #1 Temp",
    "CPU1Temp" and "cpu1temp" differ only in what this drops)."""
    return re.sub(r"[^0-9a-z]", "", text.lower())


# Sensor roles (``RoomSensor.role``) for temperatures: which air the sensor measures
INLET = "inlet"
EXHAUST = "exhaust"
GPU = "gpu"


@record
class RoomSensor:
    """One BMC/hwmon sensor reading with the thresholds the BMC itself reports."""

    name: str
    kind: str = OTHER
    reading: float | None = None
    unit: str | None = None  # "C", "RPM", "%", "V", "A", "W"
    status: str | None = None  # the source's own word: ok/nc/cr/nr/ns, lnc/ucr..., OK/Warning/Critical
    level: str = "ok"  # normalised: ok | noncritical | critical | nonrecoverable | unknown
    thresholds: dict[str, float] = field(default_factory=dict)  # lnr lcr lnc unc ucr unr
    states: list[str] = field(default_factory=list)  # discrete states asserted ("Presence detected", ...)
    role: str | None = None  # inlet | exhaust | gpu | cpu | ... (temperatures), from the name or context
    number: str | None = None  # IPMI sensor number ("04h") or Redfish member id
    entity: str | None = None  # IPMI entity id.instance ("7.1") or Redfish PhysicalContext
    absent: bool = False  # the sensor's device is not installed (empty bay, State Absent)
    source: str = ""  # "ipmitool sdr elist", "redfish", "sensors -j", ...


@record
class PowerSupply:
    """One power supply as Redfish or the IPMI PSU status sensor describes it."""

    name: str
    present: bool | None = None
    health: str | None = None  # ok | warning | critical (normalised)
    state: str | None = None  # Redfish Status.State or the IPMI asserted states, joined
    failed: bool = False
    predictive_failure: bool = False
    input_lost: bool = False  # AC lost / LossOfInput
    input_out_of_range: bool = False
    input_voltage: float | None = None
    capacity_w: float | None = None
    input_w: float | None = None
    output_w: float | None = None
    source: str = ""


@record
class BmcEvent:
    """One System Event Log (or Redfish log) entry."""

    id: str
    time: str | None = None  # as printed; ISO 8601 when the source gives it
    sensor_type: str | None = None  # IPMI sensor type name ("Power Supply", "Critical Interrupt")
    sensor: str | None = None  # sensor name or "#0xNN"
    description: str = ""
    asserted: bool = True  # False for "Deasserted"
    severity: str | None = None  # Redfish Severity (OK/Warning/Critical) when given
    kind: str | None = None  # classified: psu_failure, pcie_fatal, thermal_trip, ... (room_events.json)
    source: str = ""


@record
class ComponentHealth:
    """A part the BMC rates (Redfish ``Status``): a system, chassis, processor or GPU, memory module, drive,
    adapter, or a condition the service lists.  ``rollup`` is the worst state below it (a chassis whose own
    health is OK while a fan in it is failing), ``conditions`` what the BMC says is wrong."""

    name: str
    kind: str = ""  # the Redfish type: ComputerSystem, Chassis, Processor, Memory, Drive, ...
    health: str | None = None  # ok | warning | critical (Status.Health, normalised)
    rollup: str | None = None  # the same for Status.HealthRollup
    state: str | None = None  # Status.State: Enabled, Absent, UnavailableOffline, ...
    conditions: list[str] = field(default_factory=list)  # "Warning: <message>" per Status.Conditions entry
    gpu: bool = False  # a Processor whose ProcessorType is GPU
    source: str = ""  # "redfish Processor /redfish/v1/Systems/.../Processors/GPU_SXM_1"


@record
class RoomFacts:
    """Everything read about the server room for one node."""

    sensors: list[RoomSensor] = field(default_factory=list)
    psus: list[PowerSupply] = field(default_factory=list)
    events: list[BmcEvent] = field(default_factory=list)
    events_read: bool = False  # a SEL/log was read (an empty list then means "no events")
    power_consumed_w: float | None = None  # whole-system draw (DCMI / Redfish PowerControl)
    power_capacity_w: float | None = None  # what the PSUs can deliver (Redfish) if given
    redundancy: dict[str, str] = field(default_factory=dict)  # name -> state ("Fully Redundant", ...)
    chassis: dict[str, str] = field(default_factory=dict)  # ipmitool chassis status lines
    fru: dict[str, str] = field(default_factory=dict)  # product/board manufacturer, name, serial...
    bmc: str | None = None  # where it was read: "in-band", host[:port], a URL (never credentials)
    sources: list[str] = field(default_factory=list)  # what was read ("ipmitool sdr elist", ...)
    partial: list[str] = field(default_factory=list)  # why a saved output was read only in part (cut off)
    components: list[ComponentHealth] = field(default_factory=list)  # Redfish Status of systems, GPUs, ...

    def add_source(self, what: str) -> None:
        if what not in self.sources:
            self.sources.append(what)

    def temperatures(self, role: str | None = None) -> list[RoomSensor]:
        return [s for s in self.sensors if s.kind == TEMPERATURE and (role is None or s.role == role)
                and not s.absent]

    def fans(self) -> list[RoomSensor]:
        return [s for s in self.sensors if s.kind == FAN]

    def merge(self, other: RoomFacts) -> None:
        """Fold another reading in; a sensor (same name, kind and number) or PSU already known is kept."""
        for sen in other.sensors:
            same = next((x for x in self.sensors if x.name == sen.name and x.kind == sen.kind
                         and (x.number == sen.number or x.number is None or sen.number is None)), None)
            if same is None:
                self.sensors.append(sen)
                continue
            # the same sensor from another command (sdr elist + sensor): keep what each adds
            for k, th in sen.thresholds.items():
                same.thresholds.setdefault(k, th)
            if same.reading is None:
                same.reading, same.unit = sen.reading, same.unit or sen.unit
            if same.level == "unknown" and sen.level != "unknown":
                same.level, same.status = sen.level, sen.status
            same.states = same.states or sen.states
            same.number = same.number or sen.number
        names = {p.name for p in self.psus}
        self.psus.extend(p for p in other.psus if p.name not in names)
        seen = {(e.id, e.time, e.description) for e in self.events}
        self.events.extend(e for e in other.events if (e.id, e.time, e.description) not in seen)
        self.events_read = self.events_read or other.events_read
        if self.power_consumed_w is None:
            self.power_consumed_w = other.power_consumed_w
        if self.power_capacity_w is None:
            self.power_capacity_w = other.power_capacity_w
        for k, v in other.redundancy.items():
            self.redundancy.setdefault(k, v)
        for k, v in other.chassis.items():
            self.chassis.setdefault(k, v)
        for k, v in other.fru.items():
            self.fru.setdefault(k, v)
        self.bmc = self.bmc or other.bmc
        for s in other.sources:
            self.add_source(s)
        self.partial.extend(p for p in other.partial if p not in self.partial)
        have = {(c.kind, c.name, c.source) for c in self.components}
        self.components.extend(c for c in other.components if (c.kind, c.name, c.source) not in have)
