// gpuclinic watch dashboard: the server-room panel (inlet air, fans, power supplies from the BMC).
// app.js calls renderRoom(state) after each poll of /api/state.  Colours come from the "state" the
// agent attached to each item (the same judgement as `doctor`), never from thresholds kept here.
// Every chip writes data-* attributes so tests can check what was drawn.
"use strict";

function roomChip(kind, name, text, state) {
  const c = document.createElement("span");
  c.className = "room-chip " + (state || "ok");
  c.dataset.kind = kind;
  c.dataset.name = name;
  c.dataset.state = state || "ok";
  const n = document.createElement("span");
  n.className = "n";
  n.textContent = name;
  const v = document.createElement("b");
  v.textContent = text;
  c.appendChild(n);
  c.appendChild(v);
  return c;
}

function roomVal(v, unit) {
  if (v === null || v === undefined) return "–";
  const s = Number.isInteger(v) ? String(v) : v.toFixed(1);
  return unit ? s + " " + unit : s;
}

function renderRoom(st) {
  const sec = document.getElementById("room");
  if (!sec) return;
  const room = st && st.room;
  sec.textContent = "";
  if (!room) {  // the agent does not poll a BMC (no --bmc/--redfish)
    sec.hidden = true;
    sec.dataset.bmc = "";
    return;
  }
  sec.hidden = false;
  const h = document.createElement("h2");
  h.textContent = "Server room";
  sec.appendChild(h);
  const inlet = room.inlet_c || [], fans = room.fans || [], psus = room.psus || [];
  const order = ["ok", "info", "warning", "critical"];
  let worst = "ok";
  for (const x of [...inlet, ...fans, ...psus]) {
    if (order.indexOf(x.state) > order.indexOf(worst)) worst = x.state;
  }
  sec.dataset.bmc = room.bmc || "";
  sec.dataset.state = room.error && !inlet.length && !fans.length && !psus.length ? "unknown" : worst;
  sec.dataset.inlet = inlet.length ? String(Math.max(...inlet.map(x => x.value ?? -Infinity))) : "";
  sec.dataset.fans = String(fans.length);
  sec.dataset.fansBad = String(fans.filter(x => x.state === "warning" || x.state === "critical").length);
  sec.dataset.psus = String(psus.length);
  sec.dataset.psusBad = String(psus.filter(x => x.state === "warning" || x.state === "critical").length);
  const meta = document.createElement("div");
  meta.className = "room-meta";
  let m = "BMC " + (room.bmc || "?");
  if (room.polled_at) m += " · polled " + fmtTime(room.polled_at);
  if (room.power_w !== null && room.power_w !== undefined) m += " · system power " + roomVal(room.power_w, "W");
  meta.textContent = m;
  if (room.error) {
    const e = document.createElement("span");
    e.className = "bad";
    e.textContent = " · " + room.error;
    meta.appendChild(e);
  }
  sec.appendChild(meta);
  const rows = [
    ["Inlet air", inlet.map(x => roomChip("inlet", x.sensor, roomVal(x.value, "°C"), x.state))],
    ["Fans", fans.map(x => roomChip("fan", x.fan, roomVal(x.value, x.unit === "%" ? "%" : (x.unit || "")), x.state))],
    ["Power supplies", psus.map(x => roomChip("psu", x.psu,
      (x.present === false ? "absent" : (x.health || "?")) +
      (x.input_voltage !== null && x.input_voltage !== undefined ? " · " + roomVal(x.input_voltage, "V") : ""),
      x.state))],
  ];
  for (const [label, chips] of rows) {
    const r = document.createElement("div");
    r.className = "room-row";
    const l = document.createElement("span");
    l.className = "room-label";
    l.textContent = label;
    r.appendChild(l);
    if (!chips.length) {
      const none = document.createElement("span");
      none.className = "room-none";
      none.textContent = "none reported";
      r.appendChild(none);
    }
    for (const c of chips) r.appendChild(c);
    sec.appendChild(r);
  }
}
