#!/usr/bin/env node
// Builds a hookgate transform component from a JavaScript or TypeScript module:
// esbuild bundles adapter.js with the module (and whatever it imports from npm) into one ES
// module; wizer loads it into hookgate's QuickJS runtime (hookgate-js-runtime.wasm, built from
// ../js-runtime) and saves the loaded state; binaryen merges into it the few WASI preview 1
// functions it calls, written over WASI 0.2 (PREVIEW1 below); jco wraps that into a component of
// the WIT world `transform`.
// Everything runs offline. Usage: see USAGE below, or `node build.mjs --help`.

import { build } from 'esbuild';
import { componentEmbed, componentNew, parse } from '@bytecodealliance/jco';
import { spawnSync } from 'node:child_process';
import { existsSync, realpathSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { basename, dirname, extname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = dirname(fileURLToPath(import.meta.url));

const USAGE = `usage: node build.mjs <module.mjs|.js|.ts> [-o out.wasm]
       npm run build -- <module> -o <out.wasm>     (from transforms/js-sdk)

  -o FILE        the component to write (default: <module name>.wasm); written aside and
                 renamed over FILE, so building into a live transforms directory is safe
  -h, --help     this text

The export a mapping names in transform.export, else the module's default export, else its
export \`transform\`, is called as fn({ payload, headers, url, path }, ctx); see README.md.`;

const USER_CWD =
  process.env.npm_package_name === '@hookgate/transform-sdk' && process.env.INIT_CWD
    ? process.env.INIT_CWD
    : process.cwd();

/** The QuickJS runtime (a core module built from transforms/js-runtime), beside this file. */
const RUNTIME = join(HERE, 'hookgate-js-runtime.wasm');

/**
 * The revision of this SDK's adapter and runtime, which a built component keeps for good: raise
 * it with every change to adapter.js or the runtime that a component built before would miss.
 * Recorded in the component's custom section `hookgate-js-sdk` as `{"adapter":<revision>}`;
 * hookgate (src/transform/builder.rs, JS_ADAPTER_REVISION, the same number) names a JavaScript
 * component of an earlier revision, or of none, and the command that rebuilds it.
 */
const ADAPTER_REVISION = 1;
const SDK_SECTION = 'hookgate-js-sdk';

/** How long a module's top level may run at build time: a loop there would hang the build. */
const LOAD_TIMEOUT_MS = 60_000;

/**
 * The WASI preview 1 functions the runtime imports (wasi-libc's and Rust's standard library's),
 * written over the WASI 0.2 interfaces hookgate's host provides, merged into the loaded module in
 * place of jco's preview 1 adapter. The adapter is a module of its own that implements all of
 * preview 1 over 0.2 with state of its own: in a component it is one more core instance, 26
 * lowered imports instead of 8 and 31 entries of the shim's table instead of 3 for wasmtime to
 * wire on every instantiation, and its state is set up again in every fresh instance
 * (docs/performance.md, "A fresh JavaScript instance"). After loading, the runtime needs only
 * randomness, the clocks, stdout and stderr (a panic's message; console output goes to the `log`
 * import) and exit; what only loading used (stdin, the environment) answers EBADF or nothing.
 * The wall clock's and a write's results are lowered into 16 static bytes of the runtime's
 * (`hookgate_preview1_scratch`), not into memory allocated: the message of a failed allocation
 * is a write, and must not need one.
 */
const PREVIEW1 = `(module
  ;; preview 1's answers: 0 success, 8 EBADF, 28 EINVAL, 29 EIO.
  (import "main" "memory" (memory 0))
  (import "main" "hookgate_preview1_scratch" (func $scratch (result i32)))
  (import "wasi:random/random@0.2.3" "get-random-u64" (func $random (result i64)))
  (import "wasi:clocks/wall-clock@0.2.3" "now" (func $wall_now (param i32)))
  (import "wasi:clocks/monotonic-clock@0.2.3" "now" (func $monotonic_now (result i64)))
  (import "wasi:cli/stdout@0.2.3" "get-stdout" (func $get_stdout (result i32)))
  (import "wasi:cli/stderr@0.2.3" "get-stderr" (func $get_stderr (result i32)))
  (import "wasi:io/streams@0.2.3" "[method]output-stream.blocking-write-and-flush"
    (func $write (param i32 i32 i32 i32)))
  (import "wasi:io/streams@0.2.3" "[resource-drop]output-stream" (func $drop_stream (param i32)))
  (import "wasi:io/error@0.2.3" "[resource-drop]error" (func $drop_error (param i32)))
  (import "wasi:cli/exit@0.2.3" "exit" (func $exit (param i32)))

  ;; Eight random bytes a call, then the tail from one more draw.
  (func (export "random_get") (param $buf i32) (param $len i32) (result i32)
    (local $v i64)
    (block $done
      (loop $words
        (br_if $done (i32.lt_u (local.get $len) (i32.const 8)))
        (i64.store align=1 (local.get $buf) (call $random))
        (local.set $buf (i32.add (local.get $buf) (i32.const 8)))
        (local.set $len (i32.sub (local.get $len) (i32.const 8)))
        (br $words)))
    (if (local.get $len)
      (then
        (local.set $v (call $random))
        (loop $bytes
          (i64.store8 (local.get $buf) (local.get $v))
          (local.set $v (i64.shr_u (local.get $v) (i64.const 8)))
          (local.set $buf (i32.add (local.get $buf) (i32.const 1)))
          (local.set $len (i32.sub (local.get $len) (i32.const 1)))
          (br_if $bytes (local.get $len)))))
    i32.const 0)

  ;; Clock 0 is real time (datetime to nanoseconds), 1 monotonic; the CPU-time clocks do not exist.
  (func (export "clock_time_get") (param $id i32) (param $precision i64) (param $out i32) (result i32)
    (local $at i32)
    (if (i32.eqz (local.get $id))
      (then
        (local.set $at (call $scratch))
        (call $wall_now (local.get $at))
        (i64.store (local.get $out)
          (i64.add
            (i64.mul (i64.load (local.get $at)) (i64.const 1000000000))
            (i64.extend_i32_u (i32.load offset=8 (local.get $at)))))
        (return (i32.const 0))))
    (if (i32.eq (local.get $id) (i32.const 1))
      (then
        (i64.store (local.get $out) (call $monotonic_now))
        (return (i32.const 0))))
    i32.const 28)

  ;; stdout and stderr only, in chunks of 4096 bytes (blocking-write-and-flush's most); a
  ;; stream's error is dropped and answered EIO with what was written before it.
  (func (export "fd_write") (param $fd i32) (param $iovs i32) (param $count i32) (param $written i32) (result i32)
    (local $stream i32) (local $ptr i32) (local $len i32) (local $n i32) (local $total i32) (local $at i32) (local $errno i32)
    (if (i32.eq (local.get $fd) (i32.const 1))
      (then (local.set $stream (call $get_stdout)))
      (else
        (if (i32.eq (local.get $fd) (i32.const 2))
          (then (local.set $stream (call $get_stderr)))
          (else (return (i32.const 8))))))
    (local.set $at (call $scratch))
    (block $done
      (loop $iov
        (br_if $done (i32.eqz (local.get $count)))
        (local.set $ptr (i32.load (local.get $iovs)))
        (local.set $len (i32.load offset=4 (local.get $iovs)))
        (block $next
          (loop $chunk
            (br_if $next (i32.eqz (local.get $len)))
            (local.set $n
              (select (local.get $len) (i32.const 4096) (i32.lt_u (local.get $len) (i32.const 4096))))
            (call $write (local.get $stream) (local.get $ptr) (local.get $n) (local.get $at))
            (if (i32.load8_u (local.get $at))
              (then
                (if (i32.eqz (i32.load8_u offset=4 (local.get $at)))
                  (then (call $drop_error (i32.load offset=8 (local.get $at)))))
                (local.set $errno (i32.const 29))
                (br $done)))
            (local.set $ptr (i32.add (local.get $ptr) (local.get $n)))
            (local.set $len (i32.sub (local.get $len) (local.get $n)))
            (local.set $total (i32.add (local.get $total) (local.get $n)))
            (br $chunk)))
        (local.set $iovs (i32.add (local.get $iovs) (i32.const 8)))
        (local.set $count (i32.sub (local.get $count) (i32.const 1)))
        (br $iov)))
    (call $drop_stream (local.get $stream))
    (i32.store (local.get $written) (local.get $total))
    local.get $errno)

  (func (export "proc_exit") (param $code i32)
    (call $exit (i32.ne (local.get $code) (i32.const 0)))
    unreachable)

  (func (export "environ_sizes_get") (param $count i32) (param $size i32) (result i32)
    (i32.store (local.get $count) (i32.const 0))
    (i32.store (local.get $size) (i32.const 0))
    i32.const 0)
  (func (export "environ_get") (param i32 i32) (result i32) i32.const 0)
  (func (export "fd_close") (param i32) (result i32) i32.const 8)
  (func (export "fd_fdstat_get") (param i32 i32) (result i32) i32.const 8)
  (func (export "fd_read") (param i32 i32 i32 i32) (result i32) i32.const 8)
  (func (export "fd_seek") (param i32 i64 i32 i32) (result i32) i32.const 8)
)`;

/** The world PREVIEW1's imports belong to: the parts of WASI 0.2 it calls, as hookgate's host has them. */
const PREVIEW1_WIT = `package hookgate:js-runtime;

world wasi-imports {
  import wasi:random/random@0.2.3;
  import wasi:clocks/wall-clock@0.2.3;
  import wasi:clocks/monotonic-clock@0.2.3;
  import wasi:cli/stdout@0.2.3;
  import wasi:cli/stderr@0.2.3;
  import wasi:cli/exit@0.2.3;
}

package wasi:random@0.2.3 {
  interface random {
    get-random-u64: func() -> u64;
  }
}

package wasi:clocks@0.2.3 {
  interface wall-clock {
    record datetime { seconds: u64, nanoseconds: u32 }
    now: func() -> datetime;
  }
  interface monotonic-clock {
    type instant = u64;
    now: func() -> instant;
  }
}

package wasi:io@0.2.3 {
  interface error {
    resource error;
  }
  interface streams {
    use error.{error};
    variant stream-error { last-operation-failed(error), closed }
    resource output-stream {
      blocking-write-and-flush: func(contents: list<u8>) -> result<_, stream-error>;
    }
  }
}

package wasi:cli@0.2.3 {
  interface stdout {
    use wasi:io/streams@0.2.3.{output-stream};
    get-stdout: func() -> output-stream;
  }
  interface stderr {
    use wasi:io/streams@0.2.3.{output-stream};
    get-stderr: func() -> output-stream;
  }
  interface exit {
    exit: func(status: result);
  }
}`;

function parseArgs(argv) {
  const opts = { entry: undefined, out: undefined };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const value = () => argv[++i] ?? fail(`${arg} needs a value`);
    if (arg === '-h' || arg === '--help') {
      console.log(USAGE);
      process.exit(0);
    } else if (arg === '-o' || arg === '--out') opts.out = resolve(USER_CWD, value());
    else if (arg.startsWith('-')) fail(`unknown option ${arg}`);
    else if (opts.entry) fail(`one module at a time (got ${opts.entry} and ${arg})`);
    else opts.entry = resolve(USER_CWD, arg);
  }
  if (!opts.entry) fail('which module? (the first argument)');
  if (!existsSync(opts.entry)) fail(`no such module: ${opts.entry}`);
  opts.out ??= resolve(USER_CWD, basename(opts.entry, extname(opts.entry)) + '.wasm');
  return opts;
}

function fail(message) {
  console.error(`build.mjs: ${message}\n\n${USAGE}`);
  process.exit(2);
}

/**
 * Refuses a module that exports nothing, before the slow part, and warns when only a mapping's
 * transform.export can pick its function. esbuild's metafile lists the entry's exports; whether
 * the one picked is a function is checked at run time.
 */
async function checkExports(entry) {
  const { metafile } = await build({ ...esbuildCommon(), entryPoints: [entry], write: false, metafile: true });
  const exports = Object.values(metafile.outputs)[0].exports;
  if (exports.length === 0) throw new Error(`${entry} exports nothing: export the function to call`);
  if (!exports.includes('default') && !exports.includes('transform')) {
    console.error(`build.mjs: ${entry} has no default export and no \`transform\`: its mappings must name one of ${exports.join(', ')} in transform.export`);
  }
}

/**
 * hookgate's own import (`log` of hookgate:transform/host), which the runtime's prelude hands to
 * the bundle under a registered symbol: the bundle then has no imports left.
 */
const hostImports = {
  name: 'hookgate-host',
  setup(build) {
    build.onResolve({ filter: /^hookgate:/ }, (args) => ({ path: args.path, namespace: 'hookgate' }));
    build.onLoad({ filter: /.*/, namespace: 'hookgate' }, (args) => ({
      contents: `export const { log } = globalThis[Symbol.for(${JSON.stringify(args.path)})];`,
      loader: 'js',
    }));
  },
};

/** Options shared by both esbuild passes. TypeScript needs nothing more: esbuild strips types. */
function esbuildCommon() {
  return {
    bundle: true,
    format: 'esm',
    platform: 'neutral', // no Node built-ins: the engine is not Node
    mainFields: ['module', 'main'],
    target: 'es2022',
    plugins: [hostImports],
    logLevel: 'warning',
  };
}

/** One ES module: the adapter importing the user's module as 'user-module'. */
async function bundle(entry, outfile) {
  await build({
    ...esbuildCommon(),
    entryPoints: [join(HERE, 'adapter.js')],
    outfile,
    alias: { 'user-module': entry },
    // The adapter reads `default` and `transform` from the module; one of them is missing.
    logOverride: { 'import-is-undefined': 'silent' },
  });
}

/**
 * The component: the runtime pre-initialised with the bundle by wizer (the bundle's top level
 * runs now, once, with wizer's own WASI preview 1), its preview 1 imports then satisfied inside
 * the module (PREVIEW1), wrapped as a component.
 */
async function compile(bundlePath, work) {
  if (!existsSync(RUNTIME)) throw new Error(`the JavaScript runtime is missing: ${RUNTIME}`);
  // Imported here, so that a missing package is this build's error, not a crash of the script.
  const { default: wizerPath } = await import('@bytecodealliance/wizer');
  const initialised = join(work, 'initialised.wasm');
  const wizer = spawnSync(
    wizerPath,
    ['--allow-wasi', '--inherit-stdio', 'true', '--wasm-bulk-memory', 'true', '-o', initialised, RUNTIME],
    {
      input: await readFile(bundlePath),
      stdio: ['pipe', 'inherit', 'pipe'],
      env: { ...process.env, RUST_BACKTRACE: '0' },
      timeout: LOAD_TIMEOUT_MS,
      maxBuffer: 64 * 1024 * 1024,
    },
  );
  if (wizer.error?.code === 'ETIMEDOUT') {
    throw new Error(`the module's top level ran for more than ${LOAD_TIMEOUT_MS / 1000} s (it runs at build time)`);
  }
  if (wizer.error) throw new Error(`cannot run wizer: ${wizer.error.message}`);
  const stderr = wizer.stderr.toString();
  if (wizer.status !== 0) {
    // The runtime prints its reason and exits with 1; wizer then adds an account of that exit,
    // which says nothing more. Any other end (a stack overflow, memory exhausted) is a trap, and
    // wizer's account, less its backtrace of numbered functions, is the only reason there is.
    const [printed, account = ''] = stderr.split(/^Error: the `wizer\.initialize` function trapped/m);
    const trap = /wasm trap: (.*)/.exec(account)?.[1];
    let reason = printed.trim();
    if (!/Exited with i32 exit status 1\b/.test(account)) {
      reason += `\n${trap ? `the runtime trapped: ${trap}` : account.trim().slice(0, 2000)}`;
    }
    throw new Error(`the module failed while loading (its top level runs at build time):\n${reason.trim()}`);
  }
  // What the module's top level printed.
  process.stderr.write(stderr);
  const merged = await mergePreview1(initialised, work);
  return withRevision(await componentNew(merged, []));
}

/**
 * The loaded module with PREVIEW1 merged into it (binaryen's wasm-merge resolves the module's
 * `wasi_snapshot_preview1` imports to PREVIEW1's exports), and PREVIEW1_WIT's world embedded, so
 * that jco types its WASI imports.
 */
async function mergePreview1(initialised, work) {
  const preview1 = join(work, 'preview1.wasm');
  await writeFile(preview1, await parse(PREVIEW1));
  const merged = join(work, 'merged.wasm');
  const wasmMerge = join(dirname(createRequire(import.meta.url).resolve('binaryen/package.json')), 'bin', 'wasm-merge');
  const merge = spawnSync(
    process.execPath,
    [wasmMerge, initialised, 'main', preview1, 'wasi_snapshot_preview1', '--all-features', '-o', merged],
    { stdio: ['ignore', 'inherit', 'pipe'], maxBuffer: 64 * 1024 * 1024 },
  );
  if (merge.error || merge.status !== 0) {
    throw new Error(`cannot merge WASI preview 1 into the runtime: ${merge.error?.message ?? merge.stderr.toString().trim()}`);
  }
  const binary = await readFile(merged);
  const unresolved = importsOf(binary).filter(([module]) => module === 'wasi_snapshot_preview1');
  if (unresolved.length > 0) {
    const names = unresolved.map(([, name]) => name).join(', ');
    throw new Error(`the runtime imports WASI preview 1 functions that PREVIEW1 lacks: ${names}`);
  }
  return componentEmbed({ binary: withoutExports(binary, MERGED_ONLY), witSource: PREVIEW1_WIT, world: 'wasi-imports' });
}

/**
 * What wasm-merge leaves exported that only PREVIEW1 calls: PREVIEW1's own functions (their
 * callers are now inside the module) and the runtime's scratch buffer.
 */
const MERGED_ONLY = new Set([
  ...[...PREVIEW1.matchAll(/\(export "([^"]+)"\)/g)].map((m) => m[1]),
  'hookgate_preview1_scratch',
]);

/** An unsigned LEB128 in `bytes` at `at`: its value and the offset after it. */
function readLeb(bytes, at) {
  let value = 0;
  let shift = 0;
  let byte;
  do {
    byte = bytes[at++];
    value += (byte & 0x7f) * 2 ** shift;
    shift += 7;
  } while (byte & 0x80);
  return [value, at];
}

/** A WebAssembly name (a length and UTF-8) in `bytes` at `at`: the name and the offset after it. */
function readName(bytes, at) {
  const [length, start] = readLeb(bytes, at);
  return [bytes.toString('utf8', start, start + length), start + length];
}

/** The sections of a core module: `{ id, start, body, end }`, `start` at its id byte. */
function* sections(bytes) {
  for (let at = 8; at < bytes.length; ) {
    const [size, body] = readLeb(bytes, at + 1);
    yield { id: bytes[at], start: at, body, end: body + size };
    at = body + size;
  }
}

/** Skips a value type at `at` (a reference type with a heap type is two parts). */
function skipValueType(bytes, at) {
  const type = bytes[at];
  return type === 0x63 || type === 0x64 ? readLeb(bytes, at + 1)[1] : at + 1;
}

/** Skips a table's or memory's limits at `at`: flags, minimum, then maximum and page size if flagged. */
function skipLimits(bytes, at) {
  const flags = bytes[at];
  at = readLeb(bytes, at + 1)[1];
  if (flags & 1) at = readLeb(bytes, at)[1];
  if (flags & 8) at = readLeb(bytes, at)[1];
  return at;
}

/** A core module's imports, as [module, name] pairs. */
function importsOf(bytes) {
  const imports = [];
  for (const section of sections(bytes)) {
    if (section.id !== 2) continue;
    let [count, at] = readLeb(bytes, section.body);
    for (; count > 0; count--) {
      let module, name;
      [module, at] = readName(bytes, at);
      [name, at] = readName(bytes, at);
      const kind = bytes[at++];
      if (kind === 0x00) at = readLeb(bytes, at)[1];
      else if (kind === 0x01) at = skipLimits(bytes, skipValueType(bytes, at));
      else if (kind === 0x02) at = skipLimits(bytes, at);
      else if (kind === 0x03) at = skipValueType(bytes, at) + 1;
      else if (kind === 0x04) at = readLeb(bytes, at + 1)[1];
      else throw new Error(`the merged module has an import of unknown kind ${kind}`);
      imports.push([module, name]);
    }
  }
  return imports;
}

/** `bytes`, a core module, with its exports named in `names` removed. */
function withoutExports(bytes, names) {
  for (const section of sections(bytes)) {
    if (section.id !== 7) continue;
    let [count, at] = readLeb(bytes, section.body);
    const kept = [];
    for (; count > 0; count--) {
      const entry = at;
      let name;
      [name, at] = readName(bytes, at);
      at = readLeb(bytes, at + 1)[1];
      if (!names.has(name)) kept.push(bytes.subarray(entry, at));
    }
    const body = Buffer.concat([leb128(kept.length), ...kept]);
    return Buffer.concat([
      bytes.subarray(0, section.start),
      Buffer.from([7]),
      leb128(body.length),
      body,
      bytes.subarray(section.end),
    ]);
  }
  return bytes;
}

/** `n` as an unsigned LEB128, as WebAssembly writes sizes. */
function leb128(n) {
  const bytes = [];
  do {
    const low = n & 0x7f;
    n >>>= 7;
    bytes.push(n ? low | 0x80 : low);
  } while (n);
  return Buffer.from(bytes);
}

/** `component` with the custom section that records which adapter revision built it. */
function withRevision(component) {
  const name = Buffer.from(SDK_SECTION);
  const content = Buffer.from(JSON.stringify({ adapter: ADAPTER_REVISION }));
  const body = Buffer.concat([leb128(name.length), name, content]);
  return Buffer.concat([Buffer.from(component), Buffer.from([0]), leb128(body.length), body]);
}

/** Writes aside and renames, so that a watcher never sees half a component. */
async function writeAtomically(path, bytes) {
  await mkdir(dirname(path), { recursive: true });
  const aside = `${path}.${process.pid}.tmp`;
  try {
    await writeFile(aside, bytes);
    await rename(aside, path);
  } catch (e) {
    await rm(aside, { force: true });
    throw e;
  }
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const work = await mkdtemp(join(tmpdir(), 'hookgate-js-'));
  try {
    const t0 = performance.now();
    await checkExports(opts.entry);
    const bundlePath = join(work, 'bundle.js');
    await bundle(opts.entry, bundlePath);
    const t1 = performance.now();
    const component = await compile(bundlePath, work);
    await writeAtomically(opts.out, component);
    const ms = (t) => `${Math.round(t)} ms`;
    console.error(`${opts.out}: ${component.length} bytes (bundle ${ms(t1 - t0)}, load and wrap ${ms(performance.now() - t1)})`);
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

// Run as a script; imported (by test/preview1.test.mjs), it only lends its parts.
if (process.argv[1] && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().catch((e) => {
    console.error(`build.mjs: ${e.message ?? e}`);
    process.exit(1);
  });
}

export { PREVIEW1, importsOf, withoutExports };
