// gpuclinic watch dashboard: polls the agent's JSON API and draws plots on <canvas>.
// No external code.  Every plot writes data-* attributes describing what it drew, so tests (and
// curious users) can check the page without reading pixels.
"use strict";

const MAX_POINTS = 900;
const POLL_MS = 2000;
const S = { series: {}, fields: [], lastTs: null, state: null, events: [], renders: 0, errors: 0 };
const C = { line: "#58a6ff", ref: "#f85149", ref2: "#8b949e", grid: "#2a313a", text: "#8b949e",
            fill: "rgba(88,166,255,0.12)", seg: "#d29922", segCrit: "#f85149" };
const CRIT_REASONS = new Set(["hw_thermal_slowdown", "hw_power_brake_slowdown", "hw_slowdown"]);
const GIB = 1024 * 1024 * 1024;

function $(sel, root) { return (root || document).querySelector(sel); }
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = text;
  return e;
}
// Alert texts mark commands with backticks (`gpuclinic doctor`): show them as code, never as
// literal backticks; built with text nodes, so a text can never inject markup.
function richText(tag, cls, text) {
  const e = el(tag, cls);
  String(text || "").split(/`([^`]+)`/).forEach((part, i) => {
    if (i % 2) e.appendChild(el("code", "", part));
    else if (part) e.appendChild(document.createTextNode(part));
  });
  return e;
}
// Round axis ticks (1, 2, 2.5, 5 x 10^k), not thirds of the data range (90.3 / 80.9 / 71.5).
function niceStep(range, n) {
  const raw = Math.max(range, 1e-9) / n;
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  const f = raw / p;
  return (f < 1.5 ? 1 : f < 2.25 ? 2 : f < 3.5 ? 2.5 : f < 7.5 ? 5 : 10) * p;
}
function fmtTick(v, step) {
  const tenths = Math.round(step * 10 * 1e6) / 1e6;
  return v.toFixed(Number.isInteger(step) ? 0 : Number.isInteger(tenths) ? 1 : 2);
}
function fmtTime(ts) { return new Date(ts * 1000).toISOString().replace("T", " ").slice(0, 19) + "Z"; }
function fmtDur(s) {
  if (s < 120) return Math.round(s) + " s";
  if (s < 7200) return Math.round(s / 60) + " min";
  return (s / 3600).toFixed(1) + " h";
}

async function getJSON(path) {
  const r = await fetch(path, { credentials: "same-origin", cache: "no-store" });
  if (!r.ok) throw new Error(path + ": HTTP " + r.status);
  return r.json();
}

async function refresh() {
  try {
    const q = S.lastTs === null ? "" : "?since=" + S.lastTs;
    const [state, ser, ev] = await Promise.all([getJSON("/api/state"), getJSON("/api/series" + q),
                                                getJSON("/api/events")]);
    S.fields = ser.fields;
    const ti = 0;
    for (const [gpu, rows] of Object.entries(ser.gpus)) {
      const cur = S.series[gpu] || [];
      for (const r of rows) {
        if (!cur.length || r[ti] > cur[cur.length - 1][ti]) cur.push(r);
      }
      S.series[gpu] = cur.slice(-MAX_POINTS);
      for (const r of rows) if (S.lastTs === null || r[ti] > S.lastTs) S.lastTs = r[ti];
    }
    S.state = state;
    S.events = ev.events;
    document.body.dataset.error = "";
    render();
  } catch (e) {
    S.errors += 1;
    document.body.dataset.error = String(e);
    const n = $("#notes");
    n.textContent = "";
    n.appendChild(el("span", "bad", "cannot reach the agent: " + e.message));
  }
}

function render() {
  const st = S.state;
  renderVerdict(st);
  renderOpen(st);
  if (typeof renderRoom === "function") renderRoom(st);  // room.js: the BMC's inlet, fans and PSUs
  renderGpus(st);
  renderEvents();
  S.renders += 1;
  document.body.dataset.rendered = String(S.renders);
  document.body.dataset.plots = String(document.querySelectorAll("canvas[data-drawn='1']").length);
  document.body.dataset.events = String(S.events.length);
}

function renderVerdict(st) {
  const v = $("#verdict");
  v.className = "verdict " + st.verdict;
  v.dataset.verdict = st.verdict;
  $(".label", v).textContent = st.verdict;
  const open = (st.incidents || []).filter(i => i.severity !== "info");
  const crit = open.filter(e => e.severity === "critical").length;
  const warn = open.filter(e => e.severity === "warning").length;
  const sm = $("#summary");
  sm.textContent = "";
  sm.appendChild(richText("span", "", open.length === 0 ? "No open problems." :
    `${crit} critical, ${warn} warning incident(s) open. Worst: ${open[0].title}`));
  const m = $("#meta");
  m.textContent = `${st.host} · ${st.backend} · driver ${st.driver_version || "?"} · ${st.gpus.length} GPU(s) · ` +
    `sample ${st.status.sample_age_s.toFixed(1)} s ago · ${st.status.samples} samples`;
  const n = $("#notes");
  n.textContent = "";
  const bad = [];
  if (st.status.stalled) bad.push("sampling stalled: metrics are stale");
  if (st.status.store_error) bad.push(`store cannot write (${st.status.store_error}); ` +
                                      `${st.status.store_buffered} rows held in memory; alerts still work`);
  if (st.status.notify_spooled) bad.push(`${st.status.notify_spooled} alert(s) waiting in the spool`);
  for (const x of st.status.notes || []) bad.push(x);
  for (const b of bad) n.appendChild(el("div", "bad", b));
  n.dataset.count = String(bad.length);
}

function renderOpen(st) {
  // one card per incident (root cause), its symptoms and their events folded under it
  const box = $("#open-events");
  box.textContent = "";
  const incs = (st.incidents || []).filter(i => i.severity !== "info");
  box.dataset.incidents = String(incs.length);
  if (!incs.length) return;
  box.appendChild(el("h2", "", "Open incidents"));
  const byKey = {};
  for (const e of st.open_events) byKey[e.key] = e;
  for (const inc of incs) {
    const card = el("div", `incident ev ${inc.severity}`);
    card.dataset.code = inc.code;
    card.dataset.severity = inc.severity;
    card.dataset.gpu = inc.gpu && inc.gpu.index !== null ? String(inc.gpu.index) : "";
    const head = el("div", "head");
    head.appendChild(el("span", `badge ${inc.severity}`, inc.severity));
    head.appendChild(el("strong", "title", inc.title));
    head.appendChild(el("span", "code", inc.code));
    head.appendChild(el("span", "when", `opened ${fmtTime(inc.opened)}`));
    card.appendChild(head);
    if (inc.symptoms.length) card.appendChild(el("div", "symptoms", "Explains: " + inc.symptoms.join(", ")));
    if (inc.first_step) card.appendChild(richText("div", "remedy", inc.first_step));
    const gpu = inc.gpu && inc.gpu.index !== null ? ` --gpu ${inc.gpu.index}` : "";
    card.appendChild(el("div", "runbook", `All steps: gpuclinic runbook ${inc.code}${gpu}`));
    const evs = (inc.events || []).map(k => byKey[k]).filter(Boolean);
    if (evs.length) {
      const det = el("details");
      det.appendChild(el("summary", "", `${evs.length} event(s) and their evidence`));
      const ul = el("ul", "events");
      for (const e of evs) ul.appendChild(eventNode(e, true));
      det.appendChild(ul);
      card.appendChild(det);
    }
    box.appendChild(card);
  }
}

const PLOTS = [
  { id: "temperature", title: "Temperature", unit: "°C", f: "temp", ref: "slowdown", refLabel: "slowdown" },
  { id: "power", title: "Power", unit: "W", f: "power", ref: "power_limit", refLabel: "limit", min0: true },
  { id: "sm_clock", title: "SM clock", unit: "MHz", f: "sm_clock", ref: "sm_clock_max", refLabel: "max", min0: true },
  { id: "utilization", title: "Utilization", unit: "%", f: "util", fixed: [0, 100] },
  { id: "memory", title: "Memory used", unit: "GiB", f: "mem_used", ref: "mem_total", refLabel: "total", scale: 1 / GIB, min0: true },
];

function gpuCard(g) {
  let card = document.querySelector(`.gpu[data-gpu='${g.index}']`);
  if (card) return card;
  card = el("div", "gpu");
  card.dataset.gpu = String(g.index);
  card.appendChild(el("h3"));
  const plots = el("div", "plots");
  for (const p of PLOTS) {
    const box = el("div", "plot");
    const ttl = el("div", "ttl");
    ttl.appendChild(el("span", "", p.title));
    ttl.appendChild(el("b"));
    box.appendChild(ttl);
    const c = el("canvas");
    c.dataset.metric = p.id;
    c.dataset.gpu = String(g.index);
    box.appendChild(c);
    plots.appendChild(box);
  }
  const tl = el("div", "plot");
  const ttl = el("div", "ttl");
  ttl.appendChild(el("span", "", "Throttle reasons"));
  ttl.appendChild(el("b"));
  tl.appendChild(ttl);
  const c = el("canvas", "timeline");
  c.dataset.metric = "throttle";
  c.dataset.gpu = String(g.index);
  tl.appendChild(c);
  plots.appendChild(tl);
  card.appendChild(plots);
  $("#gpus").appendChild(card);
  return card;
}

function renderGpus(st) {
  const idx = {};
  S.fields.forEach((f, i) => { idx[f] = i; });
  const now = st.now;
  for (const g of st.gpus) {
    const card = gpuCard(g);
    card.classList.toggle("lost", !!g.lost);
    card.dataset.lost = g.lost ? "1" : "0";
    const rows = S.series[String(g.index)] || [];
    // a lost GPU reports nothing: its plots end at its last good sample, and say so
    const good = rows.filter(r => r[idx.temp] !== null || r[idx.power] !== null);
    const lastSeen = good.length ? good[good.length - 1][0] : null;
    card.dataset.lostSince = g.lost && lastSeen !== null ? String(lastSeen) : "";
    card.dataset.firstTs = rows.length ? String(rows[0][0]) : "";
    const h = $("h3", card);
    h.textContent = `GPU ${g.index} · ${g.name || "?"} · ${g.pci_bus_id || ""}`;
    if (g.lost) {
      h.appendChild(el("span", "badge critical", "LOST"));
      h.appendChild(el("span", "since", lastSeen === null ? "no data from this GPU" :
        `no data since ${fmtTime(lastSeen)} (${fmtDur(now - lastSeen)} ago); the values below are from then`));
    }
    for (const r of g.reasons.filter(r => r !== "gpu_idle")) h.appendChild(el("span", "badge warning", r));
    if (g.processes.length) h.appendChild(el("span", "badge", `${g.processes.length} proc`));
    const span = rows.length ? Math.max(60, Math.min(now - rows[0][0], 900)) : 60;
    const x0 = now - span;
    for (const p of PLOTS) {
      const c = $(`canvas[data-metric='${p.id}']`, card);
      const sc = p.scale || 1;
      const pts = rows.filter(r => r[0] >= x0 && r[idx[p.f]] !== null).map(r => [r[0], r[idx[p.f]] * sc]);
      const refs = p.ref ? rows.filter(r => r[0] >= x0 && r[idx[p.ref]] !== null).map(r => [r[0], r[idx[p.ref]] * sc]) : [];
      drawPlot(c, pts, refs, x0, now, p);
      const last = pts.length ? pts[pts.length - 1][1] : null;
      c.parentElement.querySelector(".ttl b").textContent = last === null ? "–" :
        (g.lost ? "last " : "") +
        `${last.toFixed(p.unit === "GiB" ? 1 : 0)} ${p.unit}` + (refs.length ? ` / ${refs[refs.length - 1][1].toFixed(0)}` : "");
    }
    const tc = $("canvas[data-metric='throttle']", card);
    drawTimeline(tc, rows.filter(r => r[0] >= x0), idx.reasons, x0, now, st.reasons, g.lost ? lastSeen : undefined);
  }
  // GPUs that vanished from the sample (not even "lost") keep their card, marked
  for (const card of document.querySelectorAll(".gpu")) {
    const present = st.gpus.some(g => String(g.index) === card.dataset.gpu);
    card.dataset.present = present ? "1" : "0";
  }
}

function setupCanvas(c) {
  const dpr = window.devicePixelRatio || 1;
  const w = Math.max(200, c.clientWidth || 300), h = Math.max(60, c.clientHeight || 120);
  if (c.width !== Math.round(w * dpr) || c.height !== Math.round(h * dpr)) {
    c.width = Math.round(w * dpr);
    c.height = Math.round(h * dpr);
  }
  const ctx = c.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  return [ctx, w, h];
}

function drawPlot(c, pts, refs, x0, x1, p) {
  const [ctx, w, h] = setupCanvas(c);
  const L = 38, R = 6, T = 6, B = 16;
  let lo, hi;
  if (p.fixed) { [lo, hi] = p.fixed; } else {
    const vals = pts.map(q => q[1]).concat(refs.map(q => q[1]));
    lo = vals.length ? Math.min(...vals) : 0;
    hi = vals.length ? Math.max(...vals) : 1;
    if (p.min0) lo = 0;
    const pad = (hi - lo) * 0.08 || 1;
    lo = p.min0 ? 0 : lo - pad;
    hi += pad;
  }
  const step = niceStep(hi - lo, 4);
  const X = t => L + (t - x0) / Math.max(1e-9, x1 - x0) * (w - L - R);
  const Y = v => T + (1 - (v - lo) / Math.max(1e-9, hi - lo)) * (h - T - B);
  ctx.strokeStyle = C.grid; ctx.lineWidth = 1; ctx.fillStyle = C.text; ctx.font = "10px system-ui, sans-serif";
  const ticks = [];
  for (let k = Math.ceil(lo / step - 1e-6); k * step <= hi + step * 1e-6; k++) {
    const v = k * step, y = Y(v);
    ctx.beginPath(); ctx.moveTo(L, y); ctx.lineTo(w - R, y); ctx.stroke();
    const label = fmtTick(v, step);
    ctx.fillText(label, 2, y + 3);
    ticks.push(label);
  }
  c.dataset.ticks = ticks.join(",");
  ctx.fillText(`-${fmtDur(x1 - x0)}`, L, h - 3);
  ctx.fillText("now", w - R - 20, h - 3);
  if (refs.length) {
    ctx.save(); ctx.setLineDash([5, 4]); ctx.strokeStyle = p.id === "temperature" ? C.ref : C.ref2; ctx.lineWidth = 1.5;
    ctx.beginPath();
    refs.forEach((q, i) => { const x = X(q[0]), y = Y(q[1]); i ? ctx.lineTo(x, y) : ctx.moveTo(x, y); });
    ctx.stroke(); ctx.restore();
    ctx.fillStyle = p.id === "temperature" ? C.ref : C.ref2;
    ctx.fillText(p.refLabel, w - R - 48, Y(refs[refs.length - 1][1]) - 3);
  }
  if (pts.length) {
    ctx.beginPath();
    pts.forEach((q, i) => { const x = X(q[0]), y = Y(q[1]); i ? ctx.lineTo(x, y) : ctx.moveTo(x, y); });
    ctx.strokeStyle = C.line; ctx.lineWidth = 1.8; ctx.stroke();
    ctx.lineTo(X(pts[pts.length - 1][0]), Y(lo)); ctx.lineTo(X(pts[0][0]), Y(lo)); ctx.closePath();
    ctx.fillStyle = C.fill; ctx.fill();
  }
  const vals = pts.map(q => q[1]);
  c.dataset.drawn = "1";
  c.dataset.points = String(pts.length);
  c.dataset.last = pts.length ? String(vals[vals.length - 1]) : "";
  c.dataset.max = pts.length ? String(Math.max(...vals)) : "";
  c.dataset.min = pts.length ? String(Math.min(...vals)) : "";
  c.dataset.ref = refs.length ? String(refs[refs.length - 1][1]) : "";
  c.dataset.refDrawn = refs.length ? "1" : "0";
}

function drawTimeline(c, rows, ri, x0, x1, reasons, lostSince) {
  // one row per reason that was active in the window; a bar where it was active
  const active = [];
  for (const r of reasons) {
    if (r.name === "gpu_idle") continue;
    if (rows.some(row => row[ri] !== null && (row[ri] & r.bit))) active.push(r);
  }
  const [ctx, w, h] = setupCanvas(c);
  const L = 4, R = 6, T = 4, B = 4;
  const X = t => L + (t - x0) / Math.max(1e-9, x1 - x0) * (w - L - R);
  ctx.font = "10px system-ui, sans-serif";
  const summary = [];
  if (!active.length) {
    ctx.fillStyle = C.text;
    const none = lostSince !== undefined ? (lostSince === null ? "no data: GPU lost" : `GPU lost: no data since ${fmtTime(lostSince)}`)
      : rows.length ? "no throttling in this window" : "no data";
    ctx.fillText(none, L + 4, h / 2 + 3);
    c.dataset.empty = none;
  }
  const rh = active.length ? Math.min(22, (h - T - B) / active.length) : 0;
  active.forEach((r, i) => {
    const y = T + i * rh;
    ctx.fillStyle = C.grid; ctx.fillRect(L, y + 1, w - L - R, rh - 2);
    ctx.fillStyle = CRIT_REASONS.has(r.name) ? C.segCrit : C.seg;
    let start = null, segs = 0, secs = 0;
    rows.forEach((row, j) => {
      const on = row[ri] !== null && (row[ri] & r.bit);
      const t = row[0];
      if (on && start === null) start = t;
      const end = j === rows.length - 1 || !on;
      if (start !== null && end) {
        const stop = on ? t : t;
        ctx.fillRect(X(start), y + 1, Math.max(2, X(stop) - X(start)), rh - 2);
        segs += 1; secs += stop - start; start = null;
      }
    });
    ctx.fillStyle = "#e6e8eb";
    ctx.fillText(r.name, L + 4, y + rh / 2 + 3);
    summary.push(`${r.name}:${segs}:${Math.round(secs)}`);
  });
  c.dataset.drawn = "1";
  c.dataset.points = String(rows.length);
  c.dataset.reasons = summary.join(",");
  c.parentElement.querySelector(".ttl b").textContent = active.length ? active.map(r => r.name).join(", ") : "none";
}

function eventNode(e, compact) {
  const li = el("li", `ev ${e.severity}${e.resolved ? " resolved" : ""}`);
  li.dataset.code = e.code;
  li.dataset.severity = e.severity;
  li.dataset.gpu = e.gpu === null ? "" : String(e.gpu);
  li.dataset.state = e.resolved ? "resolved" : "open";
  const head = el("div", "head");
  head.appendChild(el("span", `badge ${e.severity}`, e.severity));
  head.appendChild(richText("strong", "title", e.title));
  head.appendChild(el("span", "code", e.code + (e.count > 1 ? ` ×${e.count}` : "")));
  const when = e.resolved ? `${fmtTime(e.opened)} · resolved after ${fmtDur(e.resolved - e.opened)}` :
    `opened ${fmtTime(e.opened)}`;
  head.appendChild(el("span", "when", when));
  li.appendChild(head);
  if (!compact || !e.resolved) {
    const ul = el("ul");
    for (const x of e.evidence.slice(0, compact ? 2 : 8)) ul.appendChild(richText("li", "", x));
    li.appendChild(ul);
    if (e.remedy) li.appendChild(richText("div", "remedy", e.remedy));
  }
  return li;
}

function renderEvents() {
  const ul = $("#events");
  ul.textContent = "";
  if (!S.events.length) ul.appendChild(el("li", "ev", "No events yet."));
  for (const e of S.events) ul.appendChild(eventNode(e, false));
}

refresh();
setInterval(refresh, POLL_MS);
