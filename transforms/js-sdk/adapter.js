// The glue between a hookgate transform written in JavaScript and hookgate's WIT world
// `transform` (wit/transform.wit). build.mjs bundles this file with the user's module (imported
// as 'user-module') and ComponentizeJS turns the bundle into a component.
//
// It implements the contract of the gateway hookgate replaces: the module's default export (else
// its export `transform`) is called as fn({ payload, headers, url, path }, ctx) and answers
//   undefined -> the mapping's own action (keep)      null -> nothing happens (skip)
//   { kind: 'wake', text, mode }                      { kind: 'agent', message, ... }
//   { kind: 'respond', status, contentType, body }    (kind is inferred from `text` / `message`)
// Everything is checked here: ComponentizeJS traps on a value that does not fit the WIT types and
// on an uncaught exception, and a trap tells the operator far less than an error message.

import log from 'log';
import * as userModule from 'user-module';

// Replaced by build.mjs: false only with --allow-fetch, a test aid for the host's refusal.
const stubFetch = __HOOKGATE_STUB_FETCH__;

if (stubFetch) {
  // Transforms have no network; say so instead of failing somewhere inside the engine.
  globalThis.fetch = function fetch() {
    throw new Error('fetch() is not available in hookgate transforms (no network)');
  };
}

const userFn = pickUserFunction(userModule);
const LEVELS = ['debug', 'info', 'warn', 'error'];
const WAKE_MODES = ['now', 'next-heartbeat'];
const AGENT_STRINGS = ['name', 'agentId', 'sessionKey', 'channel', 'to', 'model', 'thinking'];

/** The function to call: the default export, else a named export `transform`. */
function pickUserFunction(mod) {
  const candidates = [mod['default'], mod['transform']];
  return candidates.find((f) => typeof f === 'function');
}

/** The component's export: never throws, since a thrown exception would trap. */
export async function transform(req) {
  try {
    if (!userFn) throw new Error('the module exports no function (default or `transform`)');
    const result = await userFn(inputOf(req), contextOf(req));
    return { tag: 'ok', val: outcomeOf(result) };
  } catch (e) {
    return { tag: 'err', val: errorText(e) };
  }
}

// ---- request -> ({ payload, headers, url, path }, ctx) ----

function inputOf(req) {
  const path = req.name;
  return { payload: parsePayload(req.body), headers: headersOf(req.headers), url: urlOf(path, req.query), path };
}

/** The body as JSON, or null when it is not JSON (including an empty body). */
function parsePayload(body) {
  try {
    return JSON.parse(new TextDecoder().decode(body));
  } catch {
    return null;
  }
}

/** Lower-case names to values; a repeated header's values joined with ', ' as in HTTP. */
function headersOf(pairs) {
  const joined = new Map();
  for (const [name, value] of pairs) {
    const key = name.toLowerCase();
    joined.set(key, joined.has(key) ? `${joined.get(key)}, ${value}` : value);
  }
  // fromEntries defines own properties, so even a header named __proto__ stays a plain entry.
  return Object.fromEntries(joined);
}

function urlOf(path, query) {
  const search = new URLSearchParams(query).toString();
  return `/hooks/${path}${search ? `?${search}` : ''}`;
}

function contextOf(req) {
  return {
    mappingId: req.mappingId,
    config: req.config === undefined ? undefined : JSON.parse(req.config),
    log: ctxLog,
  };
}

function ctxLog(level, message) {
  if (!LEVELS.includes(level)) {
    throw new Error(`ctx.log: level must be one of ${LEVELS.join(', ')} (got ${JSON.stringify(level)})`);
  }
  log(level, String(message));
}

// ---- what the function returned -> outcome ----

function outcomeOf(r) {
  if (r === undefined) return { tag: 'keep' };
  if (r === null) return { tag: 'skip' };
  if (typeof r !== 'object' || Array.isArray(r)) {
    invalid(`the transform returned ${describe(r)}; expected an object, null or undefined`);
  }
  const kind = r.kind ?? (r.text !== undefined ? 'wake' : r.message !== undefined ? 'agent' : undefined);
  switch (kind) {
    case 'wake':
      return { tag: 'run', val: { tag: 'wake', val: wakeOf(r) } };
    case 'agent':
      return { tag: 'run', val: { tag: 'agent', val: agentOf(r) } };
    case 'respond':
      return { tag: 'respond', val: replyOf(r) };
    case undefined:
      return invalid('the returned object has no kind, text or message; give { kind: "wake", text } or { kind: "agent", message }');
    default:
      return invalid(`kind must be "wake", "agent" or "respond" (got ${describe(kind)})`);
  }
}

function wakeOf(r) {
  return { text: text(r.text, 'text'), mode: wakeMode(r.mode ?? r.wakeMode, r.mode != null ? 'mode' : 'wakeMode') };
}

function agentOf(r) {
  const agent = { message: text(r.message, 'message'), wakeMode: wakeMode(r.wakeMode, 'wakeMode') };
  for (const field of AGENT_STRINGS) agent[field] = optionalString(r[field], field);
  agent.deliver = optionalBoolean(r.deliver, 'deliver');
  agent.timeoutSeconds = optionalU32(r.timeoutSeconds, 'timeoutSeconds');
  return agent;
}

function replyOf(r) {
  const status = r.status ?? 200;
  if (!Number.isInteger(status) || status < 200 || status > 599) {
    invalid(`status must be a whole number from 200 to 599 (got ${describe(status)})`);
  }
  let contentType = optionalString(r.contentType, 'contentType');
  let body = r.body ?? '';
  if (typeof body === 'string') {
    body = new TextEncoder().encode(body);
  } else if (ArrayBuffer.isView(body)) {
    body = new Uint8Array(body.buffer, body.byteOffset, body.byteLength);
  } else {
    // Any other value is sent as JSON, the common handshake answer ({ challenge }).
    body = new TextEncoder().encode(JSON.stringify(body));
    contentType ??= 'application/json';
  }
  return { status, contentType, body };
}

// ---- field checks: each failure names the field, and becomes the request's error ----

/**
 * The text of a wake or the message of a run: a string, blank included (hookgate answers a blank
 * one with 400 `hook mapping requires text|message`, as the OpenClaw gateway does); unset is blank.
 */
function text(v, field) {
  if (v == null) return '';
  if (typeof v !== 'string') invalid(`${field} must be a string (got ${describe(v)})`);
  return v;
}

function optionalString(v, field) {
  if (v == null) return undefined;
  if (typeof v !== 'string') invalid(`${field} must be a string (got ${describe(v)})`);
  return v;
}

function optionalBoolean(v, field) {
  if (v == null) return undefined;
  if (typeof v !== 'boolean') invalid(`${field} must be true or false (got ${describe(v)})`);
  return v;
}

function optionalU32(v, field) {
  if (v == null) return undefined;
  if (!Number.isInteger(v) || v < 0 || v > 0xffffffff) invalid(`${field} must be a whole number of seconds (got ${describe(v)})`);
  return v;
}

/** The WIT enum wants exactly 'now' or 'next-heartbeat'; anything else would trap. */
function wakeMode(v, field) {
  if (v == null) return undefined;
  if (!WAKE_MODES.includes(v)) invalid(`${field} must be "now" or "next-heartbeat" (got ${describe(v)})`);
  return v;
}

function invalid(message) {
  throw new Error(`invalid transform result: ${message}`);
}

function describe(v) {
  if (typeof v === 'string') return JSON.stringify(v);
  if (v === null || v === undefined || typeof v !== 'object') return String(v);
  return Array.isArray(v) ? 'an array' : 'an object';
}

/** The message of whatever was thrown: an Error's message, a string as is, else its JSON. */
function errorText(e) {
  if (e instanceof Error) return e.message || e.name || 'Error';
  if (typeof e === 'string') return e;
  try {
    return JSON.stringify(e) ?? String(e);
  } catch {
    return String(e);
  }
}
