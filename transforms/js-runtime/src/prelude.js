// The web globals of hookgate's JavaScript transforms, over the native functions of globals.rs
// (`native`, which stays private to this closure). Evaluated once, when the runtime is
// initialised with a bundle, before the bundle.
(function (native) {
  'use strict';

  const define = (name, value) =>
    Object.defineProperty(globalThis, name, { value, writable: true, configurable: true, enumerable: false });

  // Rust takes strings as UTF-8, which a lone surrogate (half an emoji cut by `slice`) is not: such
  // a string would fail the call where the web shows U+FFFD, so every string that leaves for Rust
  // goes through here.
  const text = (value) => String(value).toWellFormed();
  const log = (level, message) => native.log(level, text(message));

  // hookgate's import, for the bundle's `import { log } from 'hookgate:transform/host@0.2.0'`
  // (build.mjs resolves it to this).
  Object.defineProperty(globalThis, Symbol.for('hookgate:transform/host@0.2.0'), {
    value: Object.freeze({ log }),
  });

  // ---- console: one line per call, to the server log ----

  function inspect(value) {
    if (typeof value === 'string') return value;
    if (value instanceof Error) return value.stack ? `${value.name}: ${value.message}\n${value.stack}` : `${value.name}: ${value.message}`;
    if (typeof value === 'object' && value !== null) {
      try {
        return JSON.stringify(value) ?? String(value);
      } catch {
        return Object.prototype.toString.call(value);
      }
    }
    return String(value);
  }
  const line = (args) => args.map(inspect).join(' ');
  const console = {};
  for (const [method, level] of [
    ['debug', 'debug'], ['log', 'info'], ['info', 'info'], ['warn', 'warn'], ['error', 'error'],
    ['trace', 'debug'], ['dir', 'info'], ['table', 'info'],
  ]) {
    console[method] = (...args) => log(level, line(args));
  }
  console.assert = (condition, ...args) => {
    if (!condition) log('error', line(['Assertion failed', ...args]));
  };
  const counts = new Map();
  console.count = (label = 'default') => {
    counts.set(String(label), (counts.get(String(label)) ?? 0) + 1);
    log('info', `${label}: ${counts.get(String(label))}`);
  };
  console.countReset = (label = 'default') => counts.delete(String(label));
  define('console', console);

  // ---- TextEncoder, TextDecoder (UTF-8, the only encoding of the standard's encoder) ----

  class TextEncoder {
    get encoding() { return 'utf-8'; }
    encode(input = '') { return native.utf8Encode(text(input)); }
  }

  const UTF8_LABELS = ['utf-8', 'utf8', 'unicode-1-1-utf-8'];
  class TextDecoder {
    #fatal; #ignoreBOM;
    constructor(label = 'utf-8', options = {}) {
      if (!UTF8_LABELS.includes(String(label).trim().toLowerCase())) {
        throw new RangeError(`TextDecoder: only utf-8 is supported (got ${label})`);
      }
      this.#fatal = Boolean(options.fatal);
      this.#ignoreBOM = Boolean(options.ignoreBOM);
    }
    get encoding() { return 'utf-8'; }
    get fatal() { return this.#fatal; }
    get ignoreBOM() { return this.#ignoreBOM; }
    decode(input, options = {}) {
      if (options?.stream) throw new TypeError('TextDecoder.decode: streaming is not supported; decode the whole input at once');
      let bytes;
      if (input === undefined) bytes = new Uint8Array(0);
      else if (input instanceof ArrayBuffer) bytes = new Uint8Array(input);
      else if (ArrayBuffer.isView(input)) bytes = new Uint8Array(input.buffer, input.byteOffset, input.byteLength);
      else throw new TypeError('TextDecoder.decode: expected an ArrayBuffer or a view of one');
      return native.utf8Decode(bytes, this.#fatal, this.#ignoreBOM);
    }
  }
  define('TextEncoder', TextEncoder);
  define('TextDecoder', TextDecoder);

  // ---- URLSearchParams, URL (WHATWG, parsed by the `url` crate) ----

  const LINK = Symbol('url');

  class URLSearchParams {
    #list = [];
    #url = null;
    constructor(init = '') {
      if (typeof init === 'object' && init !== null) {
        if (typeof init[Symbol.iterator] === 'function') {
          for (const pair of init) {
            const entry = [...pair];
            if (entry.length !== 2) throw new TypeError('URLSearchParams: each pair must have two items');
            this.#list.push([text(entry[0]), text(entry[1])]);
          }
        } else {
          for (const name of Object.keys(init)) this.#list.push([text(name), text(init[name])]);
        }
      } else {
        const query = text(init);
        this.#list = native.formParse(query.startsWith('?') ? query.slice(1) : query);
      }
    }
    [LINK](url, search) {
      this.#url = url;
      this.#list = native.formParse(search.startsWith('?') ? search.slice(1) : search);
    }
    #changed() {
      if (this.#url) this.#url[LINK](this.toString());
    }
    get size() { return this.#list.length; }
    append(name, value) { this.#list.push([text(name), text(value)]); this.#changed(); }
    delete(name, value) {
      name = text(name);
      this.#list = this.#list.filter(([n, v]) => n !== name || (value !== undefined && v !== text(value)));
      this.#changed();
    }
    get(name) { name = text(name); const entry = this.#list.find(([n]) => n === name); return entry ? entry[1] : null; }
    getAll(name) { name = text(name); return this.#list.filter(([n]) => n === name).map(([, v]) => v); }
    has(name, value) { name = text(name); return this.#list.some(([n, v]) => n === name && (value === undefined || v === text(value))); }
    set(name, value) {
      name = text(name);
      const at = this.#list.findIndex(([n]) => n === name);
      if (at < 0) this.#list.push([text(name), text(value)]);
      else this.#list = this.#list.filter(([n], i) => n !== name || i === at).map((e, i) => (i === at ? [text(name), text(value)] : e));
      this.#changed();
    }
    sort() { this.#list.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)); this.#changed(); }
    forEach(callback, thisArg) { for (const [n, v] of this.#list) callback.call(thisArg, v, n, this); }
    keys() { return this.#list.map(([n]) => n)[Symbol.iterator](); }
    values() { return this.#list.map(([, v]) => v)[Symbol.iterator](); }
    entries() { return this.#list.map(([n, v]) => [n, v])[Symbol.iterator](); }
    [Symbol.iterator]() { return this.entries(); }
    toString() { return native.formSerialize(this.#list); }
  }

  // The order of globals.rs's `components`.
  const SEARCH = 8;
  const ORIGIN = 10;

  const parse = (url, base) => native.urlParse(text(url), base === undefined ? undefined : text(base));

  class URL {
    #parts;
    #params = null;
    constructor(url, base) {
      const parts = parse(url, base);
      if (parts === undefined) throw new TypeError(`Invalid URL: ${String(url)}`);
      this.#parts = parts;
    }
    static canParse(url, base) { return parse(url, base) !== undefined; }
    static parse(url, base) { try { return new URL(url, base); } catch { return null; } }
    #set(parts) {
      this.#parts = parts;
      this.#params?.[LINK](this, parts[SEARCH]);
    }
    [LINK](query) {
      // From searchParams: an empty query leaves no `?`.
      this.#parts = native.urlSet(this.#parts[0], 'search', query);
    }
    get origin() { return this.#parts[ORIGIN]; }
    get searchParams() {
      if (this.#params === null) {
        this.#params = new URLSearchParams();
        this.#params[LINK](this, this.#parts[SEARCH]);
      }
      return this.#params;
    }
    get href() { return this.#parts[0]; }
    set href(value) {
      const parts = parse(value);
      if (parts === undefined) throw new TypeError(`Invalid URL: ${String(value)}`);
      this.#set(parts);
    }
    #update(field, value) { this.#set(native.urlSet(this.#parts[0], field, text(value))); }
    get protocol() { return this.#parts[1]; }
    set protocol(value) { this.#update('protocol', value); }
    get username() { return this.#parts[2]; }
    set username(value) { this.#update('username', value); }
    get password() { return this.#parts[3]; }
    set password(value) { this.#update('password', value); }
    get host() { return this.#parts[4]; }
    set host(value) { this.#update('host', value); }
    get hostname() { return this.#parts[5]; }
    set hostname(value) { this.#update('hostname', value); }
    get port() { return this.#parts[6]; }
    set port(value) { this.#update('port', value); }
    get pathname() { return this.#parts[7]; }
    set pathname(value) { this.#update('pathname', value); }
    get search() { return this.#parts[SEARCH]; }
    set search(value) { this.#update('search', value); }
    get hash() { return this.#parts[9]; }
    set hash(value) { this.#update('hash', value); }
    toString() { return this.#parts[0]; }
    toJSON() { return this.#parts[0]; }
  }
  define('URL', URL);
  define('URLSearchParams', URLSearchParams);

  // ---- randomness: drawn per instance at call time (see globals.rs) ----

  const INTEGER_ARRAYS = [
    Int8Array, Uint8Array, Uint8ClampedArray, Int16Array, Uint16Array, Int32Array, Uint32Array,
    BigInt64Array, BigUint64Array,
  ];
  const crypto = {
    getRandomValues(array) {
      if (!INTEGER_ARRAYS.some((type) => array instanceof type)) {
        throw new DOMException('crypto.getRandomValues: expected an integer typed array', 'TypeMismatchError');
      }
      if (array.byteLength > 65536) {
        throw new DOMException('crypto.getRandomValues: at most 65536 bytes', 'QuotaExceededError');
      }
      new Uint8Array(array.buffer, array.byteOffset, array.byteLength).set(native.randomBytes(array.byteLength));
      return array;
    },
    randomUUID() {
      const b = native.randomBytes(16);
      b[6] = (b[6] & 0x0f) | 0x40;
      b[8] = (b[8] & 0x3f) | 0x80;
      const hex = Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
      return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
    },
  };
  define('crypto', crypto);
  Math.random = native.random;
  // QuickJS's own `performance` counts from when the engine started, at build time, on another
  // clock: this one counts from the instance's first reading.
  define('performance', Object.freeze({ now: native.now }));

  // Transforms have no network; say so instead of `fetch is not defined`, from the top level on.
  // As on the web, a failure of fetch is a rejected promise.
  define('fetch', async function fetch() {
    throw new TypeError('fetch() is not available in hookgate transforms (no network)');
  });
})
