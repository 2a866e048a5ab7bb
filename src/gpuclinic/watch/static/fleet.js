// Fleet page: this agent and its peers (watch --peers), worst first, from /api/fleet.
"use strict";

function age(s) {
  if (s === null || s === undefined) return "?";
  if (s < 120) return Math.round(s) + "s";
  if (s < 7200) return Math.round(s / 60) + "m";
  if (s < 172800) return Math.round(s / 3600) + "h";
  return Math.round(s / 86400) + "d";
}

function cell(tr, text) {
  const td = document.createElement("td");
  td.textContent = text;
  tr.appendChild(td);
  return td;
}

function render(doc) {
  const tbody = document.querySelector("#fleet-table tbody");
  tbody.textContent = "";
  for (const n of doc.nodes) {
    const tr = document.createElement("tr");
    tr.className = "verdict-" + n.verdict;
    tr.dataset.node = n.node;
    tr.dataset.verdict = n.verdict;
    cell(tr, n.node + (n.address && n.address !== "this agent" ? " (" + n.address + ")" : ""));
    cell(tr, n.verdict);
    const inc = n.verdict === "unreachable" ? (n.error || "unreachable")
      : n.incidents.map(i => i.code + (i.gpu !== null ? " GPU " + i.gpu : "") + " (" + age(i.age_s) + ")").join(", ");
    const td = cell(tr, inc || "-");
    td.dataset.codes = n.incidents.map(i => i.code).join(" ");
    cell(tr, n.gpus_seen === null ? "-" : n.gpus_seen + "/" + (n.gpus_expected === null ? "?" : n.gpus_expected));
    cell(tr, n.interruptions === null && n.goodput === null ? "-"
      : (n.interruptions || 0) + " / " + (n.goodput === null ? "?" : (100 * n.goodput).toFixed(1) + "%"));
    tbody.appendChild(tr);
  }
  const s = doc.summary, by = s.by_verdict;
  const p = document.getElementById("fleet-summary");
  p.textContent = s.nodes + " nodes: " + by.drain + " drain, " + by.unreachable + " unreachable, " +
    by.warning + " warning, " + by.healthy + " healthy; GPUs " + s.gpus_seen + "/" + s.gpus_expected;
  p.dataset.ready = "1";
}

async function refresh() {
  try {
    const r = await fetch("/api/fleet", {credentials: "same-origin"});
    if (r.status === 404) {
      document.getElementById("fleet-summary").textContent = "no peers: start the agent with --peers HOST:PORT,...";
      return;
    }
    render(await r.json());
  } catch (e) {
    document.getElementById("fleet-summary").textContent = "cannot load /api/fleet: " + e;
  }
}

refresh();
setInterval(refresh, 15000);
