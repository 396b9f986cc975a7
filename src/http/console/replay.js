// Bulk replay in the console (docs/operations.md#replaying-in-bulk): every request the list's
// filters select, counted by the API's dry run, replayed once the operator confirms the count,
// with the job's progress. Uses console.js's `$`, `api` and `requestQuery`; like it, sets
// server text as textContent only.
"use strict";

const BULK_POLL_MS = 1000;
const bulk = { filter: null, job: null, timer: null };

// The list's filters, as the API's `filter` (the listing's page size is not one).
function bulkFilter() {
  const query = requestQuery();
  query.delete("limit");
  return Object.fromEntries(query);
}

function bulkSay(text) {
  $("bulk-replay-status").textContent = text;
}

// The dry run: how many the filters select, how many can be replayed, and why not the others.
async function askBulkReplay() {
  bulk.filter = bulkFilter();
  $("bulk-replay-confirm").hidden = true;
  try {
    const plan = await api("/api/requests/replay", { method: "POST", body: JSON.stringify({ filter: bulk.filter, dryRun: true }) });
    const refused = plan.notReplayable.map((group) => `${group.count}: ${group.reason}`).join("; ");
    bulkSay(`${plan.matched} requests match, ${plan.replayable} can be replayed${refused ? ` (cannot: ${refused})` : ""}.`);
    if (plan.replayable === 0) return;
    const confirm = $("bulk-replay-confirm");
    confirm.textContent = `Confirm: replay ${plan.replayable} requests at ${plan.rate}/s, which may start agent work`;
    confirm.hidden = false;
    confirm.focus();
  } catch (error) {
    bulkSay(`Cannot replay: ${error.message}`);
  }
}

async function startBulkReplay() {
  $("bulk-replay-confirm").hidden = true;
  try {
    const plan = await api("/api/requests/replay", { method: "POST", body: JSON.stringify({ filter: bulk.filter }) });
    bulk.job = plan.id;
    $("bulk-replay-stop").hidden = false;
    bulkSay(`Replaying ${plan.replayable} requests…`);
    clearInterval(bulk.timer);
    bulk.timer = setInterval(followBulkReplay, BULK_POLL_MS);
  } catch (error) {
    bulkSay(`Replay refused: ${error.message}`);
  }
}

async function followBulkReplay() {
  try {
    const job = await api(`/api/requests/replays/${encodeURIComponent(bulk.job)}?summary=true`);
    if (job.state === "running") {
      bulkSay(`Replaying: ${job.done} of ${job.total} done, ${job.failed} failed.`);
      return;
    }
    clearInterval(bulk.timer);
    $("bulk-replay-stop").hidden = true;
    const ended = {cancelled: "Replay stopped", failed: "Replay failed"}[job.state] || "Replay finished";
    const why = job.reason ? ` ${job.reason}.` : "";
    bulkSay(`${ended}: ${job.done} of ${job.total} replayed, ${job.done - job.failed} succeeded, ${job.failed} failed.${why}`);
  } catch (error) {
    clearInterval(bulk.timer);
    bulkSay(`Lost the replay's progress: ${error.message}`);
  }
}

async function stopBulkReplay() {
  try {
    await api(`/api/requests/replays/${encodeURIComponent(bulk.job)}`, { method: "DELETE" });
  } catch (error) {
    bulkSay(`Could not stop the replay: ${error.message}`);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("bulk-replay").addEventListener("click", askBulkReplay);
  $("bulk-replay-confirm").addEventListener("click", startBulkReplay);
  $("bulk-replay-stop").addEventListener("click", stopBulkReplay);
});
