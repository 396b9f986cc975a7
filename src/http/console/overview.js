// The console's overview (docs/operations.md#the-overview): GET /api/overview drawn as charts.
// Every chart is SVG made here, element by element, with presentation attributes and classes
// only (no style attribute, no library, no other origin: the console's CSP holds as it is).
// Uses console.js's `$`, `api`, `el`, `show` and `openRun`; like it, sets server text as
// textContent only.
"use strict";

const SVG = "http://www.w3.org/2000/svg";

// How a request ended, in the API's names and in words, in the order the bars stack.
const OUTCOMES = [
  ["accepted", "accepted"],
  ["filtered", "filtered"],
  ["batched", "batched"],
  ["held", "held"],
  ["limited", "limited (lane full)"],
  ["refused", "refused (budget)"],
  ["clientErrors", "4xx"],
  ["serverErrors", "5xx"],
];

const LIMIT_WORDS = { runsPerHour: "runs an hour", tokensPerDay: "tokens a day" };
// The statuses of runs that went wrong.
const FAILED = ["error", "timeout", "forward_failed"];

function svg(tag, attributes = {}) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, String(value));
  return node;
}

// `<title>` of an SVG element: what a pointer (or a screen reader) is told about it.
function titled(node, text) {
  const title = svg("title");
  title.textContent = text;
  node.append(title);
  return node;
}

// "45 s", "4 min 3 s", "2 h 5 min".
function duration(seconds) {
  if (seconds < 60) return `${seconds} s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ${seconds % 60} s`;
  return `${Math.floor(seconds / 3600)} h ${Math.floor((seconds % 3600) / 60)} min`;
}

function clock(ms) {
  return `${new Date(ms).toISOString().slice(11, 16)} UTC`;
}

async function loadOverview() {
  const answer = await api(`/api/overview?hours=${$("overview-hours").value}`);
  $("overview-at").textContent = `as of ${answer.at.slice(0, 19).replace("T", " ")} UTC`;
  drawHealth(answer);
  drawRequests(answer.requests);
  drawBudgets(answer.budgets);
  drawSpend(answer.spend);
  drawLanes(answer.lanes);
  drawRuns(answer.runs);
  drawOldestHeld(answer.oldestHeld);
  drawEdge(answer.edge);
}

// One line that says whether anything needs the operator.
function drawHealth(answer) {
  const notes = [];
  const totals = answer.requests.totals;
  if (totals.serverErrors) notes.push(`${totals.serverErrors} requests failed (5xx)`);
  const spent = answer.budgets.filter((b) => b.used >= b.max);
  if (spent.length) notes.push(`${spent.length === 1 ? "a budget is" : `${spent.length} budgets are`} spent`);
  const held = answer.runs.find((r) => r.status === "held").runs;
  if (held) notes.push(`${held} held ${held === 1 ? "run waits" : "runs wait"}`);
  const failed = answer.runs.filter((r) => FAILED.includes(r.status)).reduce((n, r) => n + r.runs, 0);
  if (failed) notes.push(`${failed} failed ${failed === 1 ? "run" : "runs"} kept`);
  const health = $("overview-health");
  health.className = notes.length ? "attention" : "calm";
  health.textContent = notes.length ? `Needs a look: ${notes.join("; ")}.` : "All right: no failures, no spent budget, nothing held.";
}

// Requests per minute, stacked by how they ended; a minute without requests draws nothing.
function drawRequests(requests) {
  const since = Date.parse(requests.since);
  const width = Math.round((Date.now() - since) / requests.minuteMs) + 1;
  const peak = Math.max(1, ...requests.minutes.map((m) => OUTCOMES.reduce((n, [key]) => n + m[key], 0)));
  const height = 100;
  const chart = svg("svg", {
    viewBox: `0 0 ${width} ${height}`, preserveAspectRatio: "none", role: "img", class: "requests-chart",
    "aria-label": `Requests per minute since ${clock(since)}, at most ${peak} in a minute`,
  });
  chart.append(svg("rect", { class: "plot", x: 0, y: 0, width, height }));
  for (const minute of requests.minutes) {
    const x = Math.round((minute.minuteMs - since) / requests.minuteMs);
    const total = OUTCOMES.reduce((n, [key]) => n + minute[key], 0);
    const group = svg("g", { class: "minute", "data-minute": new Date(minute.minuteMs).toISOString(), "data-total": total });
    const said = [];
    let top = height;
    for (const [key, words] of OUTCOMES) {
      group.setAttribute(`data-${key}`, minute[key]);
      if (!minute[key]) continue;
      said.push(`${minute[key]} ${words}`);
      const tall = (minute[key] / peak) * height;
      top -= tall;
      group.append(svg("rect", { class: `o-${key}`, x: x + 0.1, y: top, width: 0.8, height: tall }));
    }
    chart.append(titled(group, `${clock(minute.minuteMs)}: ${said.join(", ")}`));
  }
  $("requests-chart").replaceChildren(chart);
  $("requests-peak").textContent = `peak ${peak} a minute`;
  $("requests-from").textContent = clock(since);
  const legend = $("requests-legend");
  legend.replaceChildren();
  for (const [key, words] of OUTCOMES) {
    const item = el("li", null, { "data-outcome": key, "data-count": requests.totals[key] });
    item.append(el("span", null, { class: `swatch o-${key}`, "aria-hidden": "true" }));
    item.append(el("span", `${words} ${requests.totals[key]}`));
    legend.append(item);
  }
}

// A horizontal bar: `value` of `max`, full (and marked so) at `max`.
function bar(value, max, className = "") {
  const chart = svg("svg", { viewBox: "0 0 100 10", preserveAspectRatio: "none", class: "bar", "aria-hidden": "true" });
  chart.append(svg("rect", { class: "track", x: 0, y: 0, width: 100, height: 10 }));
  const filled = max > 0 ? Math.min(value / max, 1) * 100 : 0;
  chart.append(svg("rect", { class: `fill ${className}`, x: 0, y: 0, width: filled, height: 10 }));
  return chart;
}

// A list of labelled bars: each row's label, its bar, and the value in words.
function bars(list, rows, empty) {
  list.replaceChildren();
  for (const row of rows) {
    const item = el("li", null, row.attributes);
    item.append(el("span", row.label, { class: "label" }));
    item.append(row.chart);
    item.append(el("span", row.words, { class: "value" }));
    list.append(item);
  }
  if (!rows.length) list.append(el("li", empty, { class: "empty" }));
}

function drawBudgets(budgets) {
  bars($("budgets-list"), budgets.map((b) => ({
    attributes: { "data-budget": `${b.scope}:${b.id}:${b.limit}`, "data-used": b.used, "data-max": b.max },
    label: `${b.scope} ${b.id}`,
    chart: bar(b.used, b.max, b.used >= b.max ? "spent" : ""),
    words: `${b.used} of ${b.max} ${LIMIT_WORDS[b.limit]}${b.used >= b.max ? `: spent, runs ${b.onExceeded === "hold" ? "held" : "refused"}` : ""}`,
  })), "No budgets are set.");
}

// Each agent mapping's tokens (or, where none are known here, runs) over 24 hours, against the
// mapping that spent most.
function drawSpend(spend) {
  const tokens = (s) => s.inputTokens === null ? null : s.inputTokens + s.outputTokens;
  const most = Math.max(1, ...spend.map((s) => tokens(s) ?? s.runs));
  bars($("spend-list"), spend.map((s) => ({
    attributes: { "data-mapping": s.mappingId, "data-runs": s.runs, "data-tokens": tokens(s) ?? "" },
    label: s.mappingId,
    chart: bar(tokens(s) ?? s.runs, most),
    words: tokens(s) === null ? `${s.runs} runs (tokens not known here)` : `${tokens(s)} tokens, ${s.runs} runs`,
  })), "No agent mappings.");
}

// Each lane's runs, running then queued then held, against its bounds where it has them.
function drawLanes(lanes) {
  const list = $("lanes-list");
  list.replaceChildren();
  for (const lane of lanes) {
    const name = lane.mappingId ?? `agent ${lane.agent}`;
    const item = el("li", null, { "data-lane": name, "data-running": lane.running, "data-queued": lane.queued, "data-held": lane.held });
    item.append(el("span", name, { class: "label" }));
    const room = (lane.maxConcurrent ?? 0) + (lane.maxQueued ?? 0);
    const scale = Math.max(room, lane.running + lane.queued + lane.held, 1);
    const chart = svg("svg", { viewBox: `0 0 ${scale} 10`, preserveAspectRatio: "none", class: "bar", "aria-hidden": "true" });
    chart.append(svg("rect", { class: "track", x: 0, y: 0, width: scale, height: 10 }));
    let x = 0;
    for (const part of ["running", "queued", "held"]) {
      chart.append(svg("rect", { class: `lane-${part}`, x, y: 0, width: lane[part], height: 10 }));
      x += lane[part];
    }
    item.append(chart);
    const of = (max) => (max ? ` of ${max}` : "");
    item.append(el("span", `${lane.running} running${of(lane.maxConcurrent)}, ${lane.queued} queued${of(lane.maxQueued)}, ${lane.held} held`, { class: "value" }));
    list.append(item);
  }
  if (!lanes.length) list.append(el("li", "No lanes: no agent mapping, no run waiting.", { class: "empty" }));
}

function drawRuns(runs) {
  const kept = runs.filter((r) => r.runs > 0);
  const most = Math.max(1, ...kept.map((r) => r.runs));
  bars($("runs-list"), kept.map((r) => ({
    attributes: { "data-status": r.status, "data-runs": r.runs },
    label: r.status,
    chart: bar(r.runs, most, FAILED.includes(r.status) ? "failed" : r.status === "held" ? "spent" : ""),
    words: String(r.runs),
  })), "No runs kept.");
}

function drawOldestHeld(held) {
  const box = $("oldest-held");
  box.replaceChildren();
  if (!held) {
    box.append(el("p", "No run is held."));
    return;
  }
  box.setAttribute("data-run", held.runId);
  box.setAttribute("data-waited", held.waitedSeconds);
  const by = held.heldBy ? held.heldBy.split(":") : null;
  const words = by ? `${by[0]} ${by.slice(2).join(":")} ${by[1]}` : "a budget";
  box.append(el("p", `Waiting ${duration(held.waitedSeconds)}, held by the budget ${words}, since ${held.createdAt}.`, { class: "age" }));
  const open = el("button", "Open the run", { type: "button", "aria-label": `Open run ${held.runId}` });
  open.addEventListener("click", () => {
    show("runs");
    openRun(held.runId);
  });
  box.append(open);
}

// The edge link (docs/edge.md): shown only on an edge or a private node.
function drawEdge(edge) {
  const card = $("edge-card");
  card.hidden = !edge;
  if (!edge) return;
  const box = $("edge-link");
  box.replaceChildren();
  const side = edge.role === "edge" ? "This node is an edge" : `Pulling from ${edge.edgeUrl}`;
  box.append(el("p", `${side}: ${edge.connected ? "connected" : "not connected"}.`));
  const waited = Math.round(edge.oldestWaitingMs / 1000);
  box.append(el("p", `Backlog ${edge.backlog}${edge.backlog ? `, oldest waiting ${duration(waited)}` : ""}; last acknowledged #${edge.lastAcked}.`, { class: "age" }));
  if (edge.error) box.append(el("p", edge.error));
}

document.addEventListener("DOMContentLoaded", () => {
  $("overview-hours").addEventListener("change", () => refresh());
});
