// The glue between a hookgate transform written in JavaScript and hookgate's WIT world
// `transform` (wit/transform.wit, hookgate:transform@0.2.0). build.mjs bundles this file with the
// user's module (imported as 'user-module') and loads the bundle into hookgate's QuickJS runtime
// (../js-runtime), which calls `handler.transform` for each request.
//
// It runs the module as the OpenClaw gateway runs a hook transform: the export the mapping names
// (`transform.export`), else the default export, else `transform`, is called as
// fn({ payload, headers, url, path }, ctx), `url` a URL, and what it returns is merged into the
// mapping's action as OpenClaw merges it:
//   undefined, or anything not an object -> the mapping's own action       null -> nothing (skip)
//   an object -> its fields over the mapping's (`kind` may switch wake <-> agent)
//   { kind: 'respond', status, contentType, body } -> this response (hookgate's own)
// Field values OpenClaw would not use (a number as `message`, `deliver: 'no'`) are ignored as it
// ignores them, and each is logged. Only the result's own properties are read (enumerable or
// not; an inherited one never): a payload can pollute Object.prototype through a transform's naive deep
// merge (`{"__proto__": {"to": ...}}`), and on a kept instance that outlives the call, so an
// inherited field would steer every later sender's action. Nothing here may throw out of `transform`: what the user's
// function throws is returned as the call's error, with its message, and the result is built
// with exactly the WIT types, which the runtime checks (../js-runtime/src/convert.rs).

import { log } from 'hookgate:transform/host@0.2.0';
import * as userModule from 'user-module';

const LEVELS = ['debug', 'info', 'warn', 'error'];
// The result's fields the adapter reads (fieldsOf, overridesOf, replyOf).
const FIELD_NAMES = Object.freeze(['kind', 'text', 'message', 'mode', 'wakeMode', 'name', 'agentId',
  'sessionKey', 'sessionMode', 'channel', 'to', 'model', 'thinking', 'deliver',
  'allowUnsafeExternalContent', 'sessionKeySource', 'timeoutSeconds', 'status', 'contentType', 'body']);
// Taken before any call runs: a transform's own code may replace the global during a call.
const ownNames = Object.getOwnPropertyNames;
const hasOwn = Object.hasOwn;
const isArray = Array.isArray;
const isView = ArrayBuffer.isView;
const createObject = Object.create;

/** The function to call: the named export, else the default export, else `transform`. */
function userFunction(exportName) {
  if (exportName !== undefined) {
    const named = userModule[exportName];
    if (typeof named !== 'function') {
      throw new Error(`the module has no function export ${JSON.stringify(exportName)} (transform.export)`);
    }
    return named;
  }
  const fn = typeof userModule['default'] === 'function' ? userModule['default'] : userModule['transform'];
  if (typeof fn !== 'function') throw new Error('the module exports no function (default or `transform`)');
  return fn;
}

/** The component's export: never throws; the user's exceptions become the call's error. */
export const handler = {
  // The request's fields as arguments, in this order (../js-runtime/src/convert.rs): an object
  // would cost a property defined and read for each.
  async transform(name, url, headers, bodyText, body, mappingId, config, exportName) {
    try {
      const fn = userFunction(exportName);
      const result = await fn(inputOf(name, url, headers, bodyText), contextOf(mappingId, config, body));
      return { tag: 'ok', val: outcomeOf(result) };
    } catch (e) {
      return { tag: 'err', val: errorText(e) };
    }
  },
};

// ---- request -> ({ payload, headers, url, path }, ctx) ----

function inputOf(name, target, headers, bodyText) {
  let url;
  return {
    payload: parsePayload(bodyText),
    // Lower-case names, a repeated header's values joined with ', ' as in HTTP: the runtime
    // builds the object (../js-runtime/src/convert.rs) for a fraction of what doing it here cost.
    headers,
    // As OpenClaw builds it: the request target against http://localhost. Built when first read,
    // since most transforms never read it.
    get url() {
      return (url ??= new URL(target, 'http://localhost'));
    },
    set url(value) {
      url = value;
    },
    path: name,
  };
}

/**
 * The body as OpenClaw hands it over: a JSON object or array as parsed, `{}` for a blank body or
 * another JSON value. hookgate answers a body that is not JSON with 400 before any transform;
 * only `hookgate transform run` can pass one, which is `null` here. `text` is the body as
 * `TextDecoder` decodes it (a byte-order mark dropped, as hookgate does), decoded by the runtime.
 */
function parsePayload(text) {
  let value;
  try {
    value = JSON.parse(text);
  } catch {
    // A blank body does not parse: looked for only then, rather than trimming every body.
    return text.trim() === '' ? {} : null;
  }
  return typeof value === 'object' && value !== null ? value : {};
}

function contextOf(mappingId, config, body) {
  return {
    mappingId,
    config: config === undefined ? undefined : JSON.parse(config),
    body,
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

function outcomeOf(result) {
  if (result === null) return { tag: 'skip' };
  if (result === undefined) return { tag: 'keep' };
  if (typeof result !== 'object') {
    if (result !== false && result !== 0 && result !== '') ignored('the result', result, 'an object, null or undefined');
    return { tag: 'keep' };
  }
  const r = fieldsOf(result, isArray(result) || isView(result) ? namedFieldsOf(result) : ownNames(result));
  if (r.kind === 'respond') return { tag: 'respond', val: replyOf(r) };
  return { tag: 'merge', val: overridesOf(r) };
}

/**
 * The fields of a result the adapter reads, from its own properties only (see the top of the
 * file), each read once, in the order of the result's own names: one listing of the result's
 * names, then a read of each field it has (testing and reading each of the twenty by name cost
 * more than half of what the adapter spent on a call). Each field is set by a `switch` on the
 * name and read with its name in the code: no string becomes a property key on the way. An
 * array or a typed array may have millions of own names (its indices): for those the twenty are
 * tested by name instead (namedFieldsOf).
 */
function fieldsOf(result, names) {
  // No prototype: a setter a transform defined on Object.prototype cannot catch a field.
  const r = createObject(null);
  for (let i = 0; i < names.length; i++) {
    switch (names[i]) {
      case 'kind': r.kind = result.kind; break;
      case 'text': r.text = result.text; break;
      case 'message': r.message = result.message; break;
      case 'mode': r.mode = result.mode; break;
      case 'wakeMode': r.wakeMode = result.wakeMode; break;
      case 'name': r.name = result.name; break;
      case 'agentId': r.agentId = result.agentId; break;
      case 'sessionKey': r.sessionKey = result.sessionKey; break;
      case 'sessionMode': r.sessionMode = result.sessionMode; break;
      case 'channel': r.channel = result.channel; break;
      case 'to': r.to = result.to; break;
      case 'model': r.model = result.model; break;
      case 'thinking': r.thinking = result.thinking; break;
      case 'deliver': r.deliver = result.deliver; break;
      case 'allowUnsafeExternalContent': r.allowUnsafeExternalContent = result.allowUnsafeExternalContent; break;
      case 'sessionKeySource': r.sessionKeySource = result.sessionKeySource; break;
      case 'timeoutSeconds': r.timeoutSeconds = result.timeoutSeconds; break;
      case 'status': r.status = result.status; break;
      case 'contentType': r.contentType = result.contentType; break;
      case 'body': r.body = result.body; break;
    }
  }
  return r;
}

/** The names of FIELD_NAMES that are own properties of `result`, in that list's order. */
function namedFieldsOf(result) {
  const names = [];
  for (let i = 0; i < FIELD_NAMES.length; i++) {
    if (hasOwn(result, FIELD_NAMES[i])) names[names.length] = FIELD_NAMES[i];
  }
  return names;
}

/**
 * The fields of `r` (fieldsOf) as OpenClaw's merge reads them; the WIT record wants exact
 * types. A field the result does not give is left out rather than set to undefined, since the
 * runtime reads every field it finds (../js-runtime/src/convert.rs).
 */
function overridesOf(r) {
  // No prototype: what Object.prototype holds (or a setter defined on it) cannot become a field.
  const o = createObject(null);
  const kind = r.kind;
  // OpenClaw: `kind` "wake" is a wake, any other kind an agent run, none the mapping's kind.
  if (kind != null) o.kind = kind === 'wake' ? 'wake' : 'agent';
  if (kind != null && kind !== 'wake' && kind !== 'agent') ignored('kind', kind, '"wake" or "agent"; it runs an agent');
  // A field is checked (a call) only when the result has it: most results set two or three.
  if (r.text != null) set(o, 'text', string(r.text, 'text'));
  if (r.message != null) set(o, 'message', string(r.message, 'message'));
  // Only "next-heartbeat" changes a mode; anything else keeps the mapping's.
  if (r.mode === 'next-heartbeat') o.mode = 'next-heartbeat';
  if (r.wakeMode === 'next-heartbeat') o.wakeMode = 'next-heartbeat';
  // Spelled out rather than looped over a list of names: a field named in the code is read
  // without turning a string into a property key first, about a third of the cost of each check.
  if (r.name != null) set(o, 'name', string(r.name, 'name'));
  if (r.agentId != null) set(o, 'agentId', string(r.agentId, 'agentId'));
  if (r.sessionKey != null) set(o, 'sessionKey', string(r.sessionKey, 'sessionKey'));
  if (r.sessionMode != null) set(o, 'sessionMode', string(r.sessionMode, 'sessionMode'));
  if (r.channel != null) set(o, 'channel', string(r.channel, 'channel'));
  if (r.to != null) set(o, 'to', string(r.to, 'to'));
  if (r.model != null) set(o, 'model', string(r.model, 'model'));
  if (r.thinking != null) set(o, 'thinking', string(r.thinking, 'thinking'));
  if (r.deliver != null) set(o, 'deliver', boolean(r.deliver, 'deliver'));
  if (r.allowUnsafeExternalContent != null) {
    set(o, 'allowUnsafeExternalContent', boolean(r.allowUnsafeExternalContent, 'allowUnsafeExternalContent'));
  }
  if (o.sessionKey !== undefined) o.sessionKeySource = r.sessionKeySource === 'static' ? 'fixed' : 'external';
  if (r.timeoutSeconds != null) set(o, 'timeoutSeconds', seconds(r.timeoutSeconds, 'timeoutSeconds'));
  return o;
}

/** Sets `o[field]` unless `value` is undefined. */
function set(o, field, value) {
  if (value !== undefined) o[field] = value;
}

function replyOf(r) {
  const status = r.status ?? 200;
  if (!Number.isInteger(status) || status < 200 || status > 599) {
    invalid(`status must be a whole number from 200 to 599 (got ${describe(status)})`);
  }
  let contentType = r.contentType ?? undefined;
  if (contentType !== undefined && typeof contentType !== 'string') {
    invalid(`contentType must be a string (got ${describe(contentType)})`);
  }
  let body = r.body ?? '';
  if (typeof body === 'string') {
    body = new TextEncoder().encode(body);
  } else if (ArrayBuffer.isView(body)) {
    body = new Uint8Array(body.buffer, body.byteOffset, body.byteLength);
  } else if (body instanceof ArrayBuffer) {
    body = new Uint8Array(body);
  } else {
    // Any other value is sent as JSON, the common handshake answer ({ challenge }).
    body = new TextEncoder().encode(JSON.stringify(body));
    contentType ??= 'application/json';
  }
  return { status, contentType: contentType?.toWellFormed(), body };
}

// ---- field values (never null or undefined): one of the wrong type is ignored, as OpenClaw
// ignores it, and logged ----

function string(v, field) {
  // A lone surrogate (half an emoji cut by `slice`) becomes U+FFFD, as on the web.
  if (typeof v === 'string') return v.toWellFormed();
  return ignored(field, v, 'a string');
}

function boolean(v, field) {
  if (typeof v === 'boolean') return v;
  return ignored(field, v, 'true or false');
}

function seconds(v, field) {
  if (Number.isInteger(v) && v >= 0 && v <= 0xffffffff) return v;
  return ignored(field, v, 'a whole number of seconds');
}

function ignored(field, v, expected) {
  log('warn', `transform result: ${field} ignored: expected ${expected}, got ${describe(v)}`);
  return undefined;
}

function invalid(message) {
  throw new Error(`invalid transform result: ${message}`);
}

function describe(v) {
  if (typeof v === 'string') return JSON.stringify(v);
  if (v === null || v === undefined || typeof v !== 'object') return String(v);
  return Array.isArray(v) ? 'an array' : 'an object';
}

/**
 * The message of whatever was thrown: an Error's message, a string as is, else its JSON. Always
 * a string, and never throws (a Proxy or a throwing toString would otherwise escape).
 */
function errorText(e) {
  try {
    if (e instanceof Error) return String(e.message || e.name || 'Error').toWellFormed();
    if (typeof e === 'string') return e.toWellFormed();
    return String(JSON.stringify(e) ?? e).toWellFormed();
  } catch {
    return 'the transform threw a value that cannot be described';
  }
}
