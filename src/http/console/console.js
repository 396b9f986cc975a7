// The hookgate console (docs/operations.md#the-console). Every piece of data comes from the
// operator API with the gateway token as a header; the token lives in this tab's session
// storage only. Untrusted text (payloads, headers, errors) is only ever set as textContent:
// nothing from the server is parsed as HTML.
"use strict";

const TOKEN_KEY = "hookgate-gateway-token";
const LIVE_EVERY_MS = 2000;

const $ = (id) => document.getElementById(id);
const state = { view: "requests", requestsNext: null, runsNext: null, paged: false, timer: null, openRequest: null, openRun: null };

function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

function say(text) {
  $("status").textContent = text;
}

// Calls the API; a 401 forgets the token and asks for it again.
async function api(path, options = {}) {
  const response = await fetch(path, {
    ...options,
    headers: { Authorization: `Bearer ${token()}` },
    cache: "no-store",
  });
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  if (response.status === 401) {
    logout("The gateway token was refused.");
    throw new Error("unauthorized");
  }
  if (!response.ok) {
    const error = new Error((body && body.error) || `HTTP ${response.status}`);
    error.body = body;
    throw error;
  }
  return body;
}

// An element with text content and attributes; never HTML.
function el(tag, text, attributes = {}) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  return node;
}

function cell(row, text, className) {
  const td = el("td", text ?? "-");
  if (className) td.className = className;
  row.append(td);
  return td;
}

function fields(list, object, skip = []) {
  list.replaceChildren();
  for (const [name, value] of Object.entries(object)) {
    if (skip.includes(name)) continue;
    list.append(el("dt", name));
    const text = value === null || value === undefined ? "-" : typeof value === "object" ? JSON.stringify(value) : value;
    list.append(el("dd", text));
  }
}

// A transform's outcome in words, with why it failed: "transform failed after 0.7 ms: …".
function transformWords(record) {
  const transform = record.transform;
  if (!transform) return null;
  const ms = transform.durationMs < 10 ? transform.durationMs.toFixed(1) : Math.round(transform.durationMs);
  if (transform.outcome === "failed") return `transform failed after ${ms} ms: ${record.reason ?? transform.failure}`;
  return `transform answered ${transform.outcome} after ${ms} ms`;
}

const REPEATS = {
  idempotency: "a repeat of an earlier request (its idempotency key): answered with its run",
  redelivery: "a redelivery of a signed delivery: answered as the first time",
};

function became(record) {
  if (record.transform && record.transform.outcome === "failed") return transformWords(record);
  if (record.error) return record.reason ? `${record.error}: ${record.reason}` : record.error;
  if (record.outcome && record.reason) return `${record.outcome}: ${record.reason}`;
  if (record.outcome) return record.runIds.length ? `${record.outcome}, run ${record.runIds[0]}` : record.outcome;
  if (record.repeat) {
    const runs = record.runIds.length ? `, ${record.runIds.map((id) => `run ${id}`).join(", ")}` : "";
    return `repeat (${record.repeat})${runs}`;
  }
  if (record.runIds.length === 1) return `run ${record.runIds[0]}`;
  if (record.runIds.length > 1) return `${record.runIds.length} runs`;
  if (record.eventOutcome) return `wake ${record.eventOutcome}`;
  if (record.transform) return `transform: ${record.transform.outcome}`;
  return "-";
}

// Views

function show(view) {
  state.view = view;
  state.paged = false;
  for (const name of ["overview", "requests", "runs", "events", "system", "dryrun", "hooks", "outbound"]) {
    $(`${name}-view`).hidden = name !== view;
    const tab = document.querySelector(`nav button[data-view="${name}"]`);
    if (name === view) tab.setAttribute("aria-current", "page");
    else tab.removeAttribute("aria-current");
  }
  $("request-detail").hidden = true;
  $("run-detail").hidden = true;
  refresh();
}

// Whether a live refresh would disturb the operator: a table they are moving through by
// keyboard (a refresh replaces its buttons), or older pages they loaded.
function busy() {
  const focused = document.activeElement;
  return Boolean(focused && focused.closest("table")) || state.paged;
}

async function refresh() {
  try {
    if (state.view === "overview") await loadOverview();
    if (state.view === "requests" && $("request-detail").hidden) await loadRequests(false);
    if (state.view === "runs" && $("run-detail").hidden) await loadRuns(false);
    if (state.view === "runs" && $("run-detail").hidden) await loadSpend();
    if (state.view === "events") await loadEvents();
    if (state.view === "system") await loadSystem();
    if (state.view === "hooks") await loadHooks();
    if (state.view === "outbound") await loadOutbound();
    say("");
  } catch (error) {
    if (error.message !== "unauthorized") say(`Could not load: ${error.message}`);
  }
}

function requestQuery() {
  const query = new URLSearchParams({ limit: "50" });
  for (const name of ["hook", "mapping", "status", "outcome", "header", "body", "error"]) {
    const value = $(`filter-${name}`).value.trim();
    if (value) query.set(name, value);
  }
  return query;
}

async function loadRequests(older) {
  state.paged = older;
  const query = requestQuery();
  if (older && state.requestsNext) query.set("before", state.requestsNext);
  const page = await api(`/api/requests?${query}`);
  const body = $("requests-table").tBodies[0];
  if (!older) body.replaceChildren();
  for (const record of page.requests) {
    const row = el("tr", null, { "data-id": record.id });
    cell(row, record.at);
    cell(row, record.status, `status-${String(record.status)[0]}`);
    cell(row, record.hook);
    cell(row, record.mappingId);
    cell(row, became(record));
    const open = el("button", record.id, { type: "button", "aria-label": `Show request ${record.id}` });
    open.addEventListener("click", () => openRequest(record.id));
    cell(row, null).replaceChildren(open);
    body.append(row);
  }
  state.requestsNext = page.next;
  $("requests-more").hidden = !page.next;
}

async function openRequest(id) {
  const record = await api(`/api/requests/${encodeURIComponent(id)}`);
  state.openRequest = record;
  $("requests-view").hidden = true;
  $("request-detail").hidden = false;
  $("request-id").textContent = record.id;
  fields($("request-fields"), { ...record, transform: transformWords(record) }, ["capture", "runIds", "replays"]);
  const list = $("request-became");
  list.replaceChildren();
  for (const runId of record.runIds) {
    const item = el("li");
    const link = el("button", `run ${runId}`, { type: "button" });
    link.addEventListener("click", () => openRun(runId));
    item.append(link);
    list.append(item);
  }
  if (record.eventOutcome) list.append(el("li", `a wake, ${record.eventOutcome}`));
  if (record.outcome === "filtered") list.append(el("li", `filtered, nothing made: ${record.reason}`));
  if (record.repeat) list.append(el("li", REPEATS[record.repeat] ?? `a repeat (${record.repeat})`));
  for (const replay of record.replays) {
    const item = el("li");
    const link = el("button", `replayed as ${replay}`, { type: "button" });
    link.addEventListener("click", () => openRequest(replay));
    item.append(link);
    list.append(item);
  }
  if (!list.children.length) list.append(el("li", record.error ? `refused: ${record.error}` : "nothing"));
  const headers = $("request-headers").tBodies[0];
  headers.replaceChildren();
  const capture = record.capture;
  for (const [name, value] of capture ? capture.headers : []) {
    const row = el("tr");
    cell(row, name);
    cell(row, value);
    headers.append(row);
  }
  $("request-body").textContent = !capture ? "(not captured: set capture on the mapping or hooks.capture)"
    : capture.body ?? capture.bodyBase64 ?? capture.note ?? "";
  // The server says whether a replay may be asked for, and why not: the console repeats no rule.
  $("replay").disabled = record.replayRefusal !== null;
  $("replay-confirm").hidden = true;
  $("replay-result").textContent = record.replayRefusal ?? "";
  $("request-close").focus();
}

// A replay goes through the hook as it is now, which may start an agent run or a heartbeat: a
// second button confirms it.
function askReplay() {
  $("replay-confirm").hidden = false;
  $("replay-result").textContent = "A replay may start agent work (a run, a heartbeat).";
  $("replay-confirm").focus();
}

async function replay() {
  const record = state.openRequest;
  $("replay-confirm").hidden = true;
  $("replay-result").textContent = "Replaying…";
  try {
    const answer = await api(`/api/requests/${encodeURIComponent(record.id)}/replay`, { method: "POST" });
    const text = typeof answer.answer === "string" ? answer.answer : JSON.stringify(answer.answer);
    $("replay-result").textContent = `Replayed as ${answer.requestId}: ${answer.status} ${text}`;
  } catch (error) {
    $("replay-result").textContent = `Replay refused: ${error.message}`;
  }
}

async function loadRuns(older) {
  state.paged = older;
  const query = new URLSearchParams({ limit: "50" });
  if (older && state.runsNext) query.set("before", state.runsNext);
  const page = await api(`/api/runs?${query}`);
  const body = $("runs-table").tBodies[0];
  if (!older) body.replaceChildren();
  for (const run of page.runs) {
    const row = el("tr", null, { "data-id": run.runId });
    cell(row, run.createdAt);
    cell(row, run.status);
    cell(row, run.hookName);
    cell(row, run.sessionKey);
    const open = el("button", run.runId, { type: "button", "aria-label": `Show run ${run.runId}` });
    open.addEventListener("click", () => openRun(run.runId));
    cell(row, null).replaceChildren(open);
    cell(row, run.error);
    body.append(row);
  }
  state.runsNext = page.next;
  $("runs-more").hidden = !page.next;
}

async function openRun(id) {
  const run = await api(`/api/runs/${encodeURIComponent(id)}`);
  state.openRun = run;
  for (const name of ["requests", "runs", "events", "system"]) $(`${name}-view`).hidden = true;
  $("request-detail").hidden = true;
  $("run-detail").hidden = false;
  $("run-id").textContent = run.runId;
  fields($("run-fields"), { ...run, usage: usageWords(run), modelCalls: callsWords(run) });
  // The server says what a retry would do (null: nothing failed); the console repeats no rule.
  $("retry").disabled = run.retry === null;
  $("retry").textContent = RETRY_LABELS[run.retry] ?? "Retry what failed";
  $("retry-confirm").hidden = true;
  $("retry-result").textContent = run.retry === null ? "Nothing of this run failed." : "";
  // Only a held run can be released or cancelled; its budget is named as the API names it.
  $("held").hidden = run.status !== "held";
  $("held-by").textContent = run.heldBy ? `${run.heldBy.scope} ${run.heldBy.id} ${run.heldBy.limit}` : "";
  $("held-result").textContent = "";
  $("run-close").focus();
}

// A run's tokens in words; a forwarded run's are the upstream's to know.
function usageWords(run) {
  if (run.usage) return `${run.usage.inputTokens} input, ${run.usage.outputTokens} output tokens`;
  if (run.upstreamRunId || run.status.startsWith("forward")) return "not known here: the upstream ran the model";
  return "none reported";
}

// A run's calls to its model providers in words, in order: each call's model and provider, why
// it failed and how long the run waited before calling again ("... answered" for the last).
function callsWords(run) {
  if (!run.modelCalls || run.modelCalls.length === 0) return null;
  return run.modelCalls.map((call, i) => {
    const said = call.error ?? "answered";
    const wait = call.retryInMs == null ? "" : `, called again after ${(call.retryInMs / 1000).toFixed(1)} s`;
    return `${i + 1}. ${call.model} (${call.provider}) at ${call.at}: ${said}${wait}`;
  }).join("; ");
}

// Each agent mapping's runs and tokens over the last 24 hours, then each agent's (its heartbeat
// turns' tokens included); tokens are null in forward mode.
async function loadSpend() {
  const answer = await api("/api/spend");
  const body = $("spend-table").tBodies[0];
  body.replaceChildren();
  for (const spend of answer.mappings) {
    const row = el("tr", null, { "data-mapping": spend.mappingId });
    cell(row, spend.mappingId);
    cell(row, spend.runs);
    cell(row, spend.inputTokens ?? "not known here");
    cell(row, spend.outputTokens ?? "not known here");
    body.append(row);
  }
  const agents = $("agent-spend-table").tBodies[0];
  agents.replaceChildren();
  for (const spend of answer.agents ?? []) {
    const row = el("tr", null, { "data-agent": spend.agentId });
    cell(row, spend.agentId);
    cell(row, spend.runs);
    cell(row, spend.heartbeats);
    cell(row, spend.inputTokens ?? "not known here");
    cell(row, spend.outputTokens ?? "not known here");
    agents.append(row);
  }
}

// `action` is `release` (the run starts whatever its budget says) or `cancel` (it never runs).
async function settleHeld(action) {
  try {
    const answer = await api(`/api/runs/${encodeURIComponent(state.openRun.runId)}/${action}`, { method: "POST" });
    $("held").hidden = true;
    $("held-result").textContent = answer.status === "cancelled" ? "Cancelled: it will never run." : "Released: queued to run.";
  } catch (error) {
    $("held-result").textContent = `Refused: ${error.message}`;
  }
}

const RETRY_LABELS = { run: "Run again", delivery: "Send the reply again", relay: "Relay again" };

// A retry that calls a model again (here, or upstream through a relay) is confirmed first.
function askRetry() {
  if (!["run", "relay"].includes(state.openRun.retry)) return retry();
  $("retry-confirm").hidden = false;
  $("retry-result").textContent = "This starts agent work: the model is called again.";
  $("retry-confirm").focus();
}

async function retry() {
  $("retry-confirm").hidden = true;
  try {
    const answer = await api(`/api/runs/${encodeURIComponent(state.openRun.runId)}/retry`, { method: "POST" });
    $("retry-result").textContent = answer.retried === "run" ? "Queued to run again." : "Sent again.";
  } catch (error) {
    $("retry-result").textContent = `Retry refused: ${error.message}`;
  }
}

async function loadEvents() {
  const answer = await api("/api/sessions/main/events?latest=true&limit=200");
  const list = $("events");
  list.replaceChildren();
  for (const event of answer.events.reverse()) {
    const item = el("li", null, { value: String(event.seq) });
    item.append(el("strong", `${event.at} ${event.kind} `));
    item.append(el("span", event.text));
    list.append(item);
  }
}

async function loadSystem() {
  const status = await api("/api/config");
  fields($("config-fields"), {
    "configuration generation": status.generation,
    "last refused reload": status.lastError ? status.lastError.join("; ") : "none",
  });
  const body = $("transforms-table").tBodies[0];
  body.replaceChildren();
  for (const transform of status.transforms) {
    const row = el("tr");
    cell(row, transform.builtByOlderSdk ? `${transform.module} (built by an older SDK: rebuild it)` : transform.module);
    cell(row, transform.calls);
    cell(row, transform.failures);
    cell(row, transform.lastFailure);
    cell(row, transform.lastError);
    cell(row, transform.sha256.slice(0, 16));
    body.append(row);
  }
}

// Dry run (docs/operations.md#trying-a-change-on-recorded-traffic)

function dryRunBody() {
  const filter = {};
  for (const name of ["hook", "mapping", "status"]) {
    const value = $(`dryrun-${name}`).value.trim();
    if (value) filter[name] = value;
  }
  const span = Number($("dryrun-since").value);
  if (span) filter.since = new Date(Date.now() - span * 1000).toISOString();
  const body = { config: $("dryrun-config").value, filter };
  const dir = $("dryrun-transforms").value.trim();
  if (dir) body.transformsDir = dir;
  return body;
}

function thenWords(then) {
  if (then.error) return then.error;
  if (then.outcome) return then.outcome;
  if (then.runIds.length) return then.runIds.length === 1 ? "agent run" : `${then.runIds.length} agent runs`;
  return then.eventOutcome ? "wake" : "nothing";
}

function nowWords(now) {
  if (now.ending === "refused") return now.reason ? `${now.error}: ${now.reason}` : now.error;
  if (now.ending !== "actions") return now.ending;
  return now.actions.map((a) => `${a.kind}: ${a.kind === "wake" ? a.text : a.message}`).join("; ");
}

async function dryRun(event) {
  event.preventDefault();
  const body = $("dryrun-table").tBodies[0];
  body.replaceChildren();
  $("dryrun-problems").replaceChildren();
  $("dryrun-untried").textContent = "";
  $("dryrun-totals").textContent = "Trying the candidate…";
  let answer;
  try {
    answer = await api("/api/requests/dry-run", { method: "POST", body: JSON.stringify(dryRunBody()) });
  } catch (error) {
    $("dryrun-totals").textContent = `Not tried: ${error.message}`;
    for (const problem of (error.body && error.body.problems) || []) $("dryrun-problems").append(el("li", problem));
    return;
  }
  for (const trial of answer.requests.filter((r) => r.differs)) {
    const row = el("tr");
    cell(row, trial.id);
    cell(row, trial.at);
    cell(row, `${trial.then.mappingId ?? "-"} → ${trial.now.mappingId ?? "-"}`);
    cell(row, `${trial.then.status} → ${trial.now.status}`, `status-${String(trial.now.status)[0]}`);
    cell(row, `${thenWords(trial.then)} → ${nowWords(trial.now)}`);
    body.append(row);
  }
  const untried = answer.requests.filter((r) => r.untried).map((r) => `${r.id} (${r.untried})`);
  if (untried.length) $("dryrun-untried").textContent = `Not tried: ${untried.join(", ")}`;
  const t = answer.totals;
  const why = answer.stopped === "timeLimit" ? "The dry run ran for its time limit" : "More matched";
  const more = answer.next ? ` ${why}: the dry run stopped at ${answer.next}.` : "";
  const skipped = t.untried ? ` (${t.untried} of them not tried)` : "";
  $("dryrun-totals").textContent = `${t.requests} requests: ${t.captured} captured${skipped}, ${t.notCaptured} not captured; ${t.differing} would differ, ${t.nowFailing} that succeeded would now fail.${more}`;
}

// Session

function login(event) {
  event.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("token").value);
  $("token").value = "";
  start();
}

function logout(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  clearInterval(state.timer);
  $("login").hidden = false;
  $("logout").hidden = true;
  $("tabs").hidden = true;
  for (const section of document.querySelectorAll("main > section")) section.hidden = true;
  say(typeof message === "string" ? message : "");
  $("token").focus();
}

function start() {
  $("login").hidden = true;
  $("logout").hidden = false;
  $("tabs").hidden = false;
  show(state.view);
  clearInterval(state.timer);
  state.timer = setInterval(() => {
    if ($("live").checked && !busy()) refresh();
  }, LIVE_EVERY_MS);
}

document.addEventListener("DOMContentLoaded", () => {
  $("login").addEventListener("submit", login);
  $("logout").addEventListener("click", () => logout());
  for (const tab of document.querySelectorAll("nav button")) {
    tab.addEventListener("click", () => show(tab.dataset.view));
  }
  $("request-filters").addEventListener("submit", (event) => {
    event.preventDefault();
    state.paged = false;
    refresh();
  });
  $("requests-more").addEventListener("click", () => loadRequests(true));
  $("runs-more").addEventListener("click", () => loadRuns(true));
  $("replay").addEventListener("click", askReplay);
  $("replay-confirm").addEventListener("click", replay);
  $("retry").addEventListener("click", askRetry);
  $("retry-confirm").addEventListener("click", retry);
  $("release").addEventListener("click", () => settleHeld("release"));
  $("cancel-run").addEventListener("click", () => settleHeld("cancel"));
  $("request-close").addEventListener("click", () => show("requests"));
  $("run-close").addEventListener("click", () => show("runs"));
  $("dryrun-form").addEventListener("submit", dryRun);
  if (token()) start();
  else $("token").focus();
});
