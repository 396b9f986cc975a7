// The glue between a hookgate transform written in JavaScript and hookgate's WIT world
// `transform` (wit/transform.wit, hookgate:transform@0.2.0). build.mjs bundles this file with the
// user's module (imported as 'user-module') and loads the bundle into hookgate's QuickJS runtime
// (../js-runtime), which takes `handler`'s entries once, when it loads.
//
// The module runs as the OpenClaw gateway runs a hook transform: the export the mapping names
// (`transform.export`), else the default export, else `transform`, is called as
// fn({ payload, headers, url, path }, ctx), `url` a URL. The runtime finds the function in
// `handler.userModule`, builds both arguments and calls it itself (../js-runtime/src/arguments.rs,
// which says what each holds), for a fraction of what building them here cost; the adapter gives
// the errors of a module without the function, and `ctx.log`. What it returns is merged into the
// mapping's action as OpenClaw merges it, by the runtime (../js-runtime/src/outcome.rs, whose top
// says how each kind of value reads): it reads the result's own fields straight into the WIT
// outcome, where building objects for them here cost a third of a call. The runtime calls the
// helpers below only off that path: `settle` for a function whose value is not yet its outcome (a
// promise, a thenable, or jobs still queued), `ignored` for each field value OpenClaw would not use
// (a number as `message`, `deliver: 'no'`), `reply` for `{ kind: 'respond' }`, and `errorText`
// for what the user's function (or a getter or Proxy trap of its result) threw, which becomes the
// call's error with that message.

import { log } from 'hookgate:transform/host@0.2.0';
import * as userModule from 'user-module';

const LEVELS = ['debug', 'info', 'warn', 'error'];

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

/** The entry points of the runtime (../js-runtime/src/lib.rs), taken once when it loads. */
export const handler = {
  /**
   * The user's module: the runtime reads the function a call asks for from it
   * (../js-runtime/src/arguments.rs, `Made::function`: the export the mapping names, else the
   * default export, else `transform`) and calls it with the input and `ctx` it builds, without a
   * frame of the adapter's around the call.
   */
  userModule,

  /** The function `userModule` lacked, by its name: throws the call's error for it. */
  userFunction,

  /** `ctx.log`, the same function for every call. */
  ctxLog,

  /**
   * What `await value` gives, as an async function that awaits its function's value sees it: the
   * runtime calls this when the value is a promise (`then` undefined), a thenable (`then` the
   * function its `then` read as, not read again), or a value that jobs queued before it may
   * still change (`then` null). Never rejects: a rejection is the call's error (`threw`), not one
   * that nothing handled. The value is returned in an object without a prototype (a literal's,
   * which no global the module replaces can change), which settling reads no `then` from and
   * the runtime reads no inherited field from. `apply` is `Reflect.apply` as the runtime took it
   * before the module's top level ran, which may replace the global.
   */
  async settle(value, then, apply) {
    const settled = { __proto__: null };
    try {
      if (then === undefined) {
        settled.value = await value;
      } else if (then === null) {
        await undefined;
        settled.value = value;
      } else {
        // As `await` calls a thenable's `then`: in a job queued now, with the promise's resolvers.
        settled.value = await { then: (resolve, reject) => apply(then, value, [resolve, reject]) };
      }
    } catch (e) {
      settled.threw = true;
      settled.value = e;
    }
    return settled;
  },

  ignored,

  reply,

  errorText,
};

// ---- ctx.log ----

function ctxLog(level, message) {
  if (!LEVELS.includes(level)) {
    throw new Error(`ctx.log: level must be one of ${LEVELS.join(', ')} (got ${JSON.stringify(level)})`);
  }
  log(level, String(message));
}

// ---- the outcome's rare paths, called by the runtime (../js-runtime/src/outcome.rs) ----

/**
 * `{ kind: 'respond', status, contentType, body }` (each field `undefined` when the result does
 * not have it) as `[status, contentType, body]`, the body's bytes in a `Uint8Array`; throws the
 * call's error for a status or content type it cannot send.
 */
function reply(status, contentType, body) {
  status ??= 200;
  if (!Number.isInteger(status) || status < 200 || status > 599) {
    invalid(`status must be a whole number from 200 to 599 (got ${describe(status)})`);
  }
  contentType ??= undefined;
  if (contentType !== undefined && typeof contentType !== 'string') {
    invalid(`contentType must be a string (got ${describe(contentType)})`);
  }
  body ??= '';
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
  return [status, contentType?.toWellFormed(), body];
}

/** Logs that the result's `field` was ignored: `v`, not null or undefined, is not `expected`. */
function ignored(field, v, expected) {
  log('warn', `transform result: ${field} ignored: expected ${expected}, got ${describe(v)}`);
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
