// Subscriptions in the console (docs/subscriptions.md): the list with pause, resume, test and
// delete, a form that makes one and shows its secret this once, and the audit. Uses
// console.js's `$`, `el`, `cell` and `api`; like it, sets server text as textContent only.
"use strict";

async function loadHooks() {
  const [listing, audit] = await Promise.all([api("/api/hooks"), api("/api/audit?limit=50")]);
  const body = $("hooks-table").querySelector("tbody");
  body.replaceChildren();
  for (const hook of listing.hooks) {
    const row = el("tr");
    row.dataset.name = hook.name;
    cell(row, hook.name);
    cell(row, hook.provider);
    cell(row, hook.events.length ? hook.events.join(", ") : "all");
    const rotating = hook.previousSecretValidUntil ? ` (previous secret until ${hook.previousSecretValidUntil})` : "";
    cell(row, `${hook.paused ? "paused" : "live"}${rotating}`);
    cell(row, hook.url);
    const actions = cell(row, "");
    actions.textContent = "";
    const toggle = hook.paused ? "resume" : "pause";
    for (const [action, label] of [[toggle, toggle === "pause" ? "Pause" : "Resume"], ["test", "Test"], ["delete", "Delete"]]) {
      const button = el("button", label);
      button.type = "button";
      button.dataset.action = action;
      button.addEventListener("click", () => actOnHook(hook.name, action));
      actions.append(button);
    }
    body.append(row);
  }
  const log = $("audit-table").querySelector("tbody");
  log.replaceChildren();
  for (const entry of audit.entries) {
    const row = el("tr");
    cell(row, entry.at);
    cell(row, entry.by.credential);
    cell(row, entry.by.client);
    cell(row, entry.action);
    cell(row, entry.subscription);
    cell(row, entry.detail);
    log.append(row);
  }
}

async function actOnHook(name, action) {
  const result = $("hooks-result");
  try {
    if (action === "delete") {
      await api(`/api/hooks/${encodeURIComponent(name)}`, { method: "DELETE" });
      result.textContent = `Deleted ${name}.`;
    } else {
      const answer = await api(`/api/hooks/${encodeURIComponent(name)}/${action}`, { method: "POST" });
      result.textContent = action === "test" ? testedText(name, answer) : `${name} is ${answer.paused ? "paused" : "live"}.`;
    }
    await loadHooks();
  } catch (error) {
    result.textContent = `Could not ${action} ${name}: ${error.message}`;
  }
}

// What a test delivery became: its answer, then the record's reason or outcome.
function testedText(name, answer) {
  const record = answer.record || {};
  const became = record.reason ? `${record.outcome || record.error || "refused"}: ${record.reason}` : (record.outcome || (record.runIds && record.runIds.length ? `run ${record.runIds[0]}` : "accepted"));
  return `Test of ${name} (a signed ${answer.event}): answered ${answer.status}, ${became}.`;
}

async function createHook(event) {
  event.preventDefault();
  const form = $("hooks-form");
  const events = form.elements.events.value.split(",").map((e) => e.trim()).filter(Boolean);
  const spec = { name: form.elements.name.value.trim(), provider: form.elements.provider.value, events };
  const template = form.elements.template.value;
  if (template) spec.template = template;
  const issued = $("hooks-issued");
  try {
    const made = await api("/api/hooks", { method: "POST", body: JSON.stringify(spec) });
    issued.textContent = `Made ${made.name}: give the sender ${made.url} and the secret ${made.secret}. The secret is shown this once.`;
    issued.hidden = false;
    form.reset();
    await loadHooks();
  } catch (error) {
    const problems = (error.body && error.body.problems) || [];
    issued.textContent = `Could not make it: ${[error.message, ...problems].join("; ")}`;
    issued.hidden = false;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("hooks-form").addEventListener("submit", createHook);
});
