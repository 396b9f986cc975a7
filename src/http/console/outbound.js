// Outbound messages in the console (docs/outbound.md): the callbacks and lifecycle webhooks of
// the outbox, failed or pending first by the filter, each failed one with a button that sends
// it again (POST /api/outbound/{id}/retry, its webhook-id unchanged). Uses console.js's `$`,
// `el`, `cell` and `api`; like it, sets server text as textContent only.
"use strict";

async function loadOutbound() {
  const status = $("outbound-status").value;
  const query = new URLSearchParams({ limit: "100" });
  if (status) query.set("status", status);
  const listing = await api(`/api/outbound?${query}`);
  const body = $("outbound-table").querySelector("tbody");
  body.replaceChildren();
  for (const message of listing.messages) {
    const row = el("tr");
    row.dataset.id = String(message.id);
    cell(row, message.createdAt);
    cell(row, message.event || "(waiting for its run)");
    cell(row, message.url ? `${message.destination} ${message.url}` : message.destination);
    cell(row, message.runId || "-");
    cell(row, message.status);
    cell(row, String(message.attempts));
    cell(row, message.lastError || "");
    const actions = cell(row, "");
    actions.textContent = "";
    if (message.status === "failed") {
      const button = el("button", "Send again");
      button.type = "button";
      button.dataset.action = "retry";
      button.addEventListener("click", () => retryOutbound(message.id));
      actions.append(button);
    }
    body.append(row);
  }
  $("outbound-empty").hidden = listing.messages.length > 0;
}

async function retryOutbound(id) {
  const result = $("outbound-result");
  try {
    await api(`/api/outbound/${id}/retry`, { method: "POST" });
    result.textContent = `Message ${id} is pending again, with the same webhook-id.`;
    await loadOutbound();
  } catch (error) {
    result.textContent = `Could not send message ${id} again: ${error.message}`;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("outbound-status").addEventListener("change", () => loadOutbound().catch(() => {}));
});
