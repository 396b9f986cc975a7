// Runs in bulk in the console (docs/operations.md#runs-in-bulk): release, cancel or retry every
// run the form's filters select, counted by the API's dry run, done once the operator confirms
// the count. Uses console.js's `$`, `api` and `refresh`; like it, sets server text as
// textContent only.
"use strict";

const runsBulk = { action: null, filter: null };

const RUNS_BULK_DONE = { release: "Released", cancel: "Cancelled", retry: "Retried" };

function runsBulkSay(text) {
  $("runs-bulk-result").textContent = text;
}

// The form's filters that are set, as the API's `filter`.
function runsBulkFilter() {
  const filter = {};
  for (const key of ["mapping", "status", "agent", "since"]) {
    const value = $(`runs-bulk-${key}`).value.trim();
    if (value) filter[key] = value;
  }
  return filter;
}

// The dry run: how many runs match, to how many the action applies, and why not the others.
async function askRunsBulk(event) {
  event.preventDefault();
  runsBulk.action = $("runs-bulk-action").value;
  runsBulk.filter = runsBulkFilter();
  $("runs-bulk-confirm").hidden = true;
  try {
    const path = `/api/runs/${encodeURIComponent(runsBulk.action)}`;
    const plan = await api(path, { method: "POST", body: JSON.stringify({ filter: runsBulk.filter, dryRun: true }) });
    const skipped = plan.skipped.map((group) => `${group.count}: ${group.reason}`).join("; ");
    runsBulkSay(`${plan.matched} runs match, ${plan.action} applies to ${plan.applied}${skipped ? ` (skipped: ${skipped})` : ""}.`);
    if (plan.applied === 0) return;
    const confirm = $("runs-bulk-confirm");
    confirm.textContent = `Confirm: ${plan.action} ${plan.applied} runs`;
    confirm.hidden = false;
    confirm.focus();
  } catch (error) {
    runsBulkSay(`Cannot ${runsBulk.action}: ${error.message}`);
  }
}

async function runRunsBulk() {
  $("runs-bulk-confirm").hidden = true;
  try {
    const path = `/api/runs/${encodeURIComponent(runsBulk.action)}`;
    const done = await api(path, { method: "POST", body: JSON.stringify({ filter: runsBulk.filter }) });
    const failed = done.failed.map((run) => `${run.runId}: ${run.error}`).join("; ");
    runsBulkSay(`${RUNS_BULK_DONE[done.action]} ${done.applied} of ${done.matched} runs, ${done.failed.length} failed${failed ? ` (${failed})` : ""}.`);
    refresh();
  } catch (error) {
    runsBulkSay(`Refused: ${error.message}`);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("runs-bulk").addEventListener("submit", askRunsBulk);
  $("runs-bulk-confirm").addEventListener("click", runRunsBulk);
  // A changed form asks for a new count: a confirmation always matches what was counted.
  $("runs-bulk").addEventListener("input", () => {
    $("runs-bulk-confirm").hidden = true;
  });
});
