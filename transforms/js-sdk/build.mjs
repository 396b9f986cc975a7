#!/usr/bin/env node
// Builds a hookgate transform component from a JavaScript or TypeScript module:
// esbuild bundles adapter.js with the module (and whatever it imports from npm) into one ES
// module; wizer loads it into hookgate's QuickJS runtime (hookgate-js-runtime.wasm, built from
// ../js-runtime) and saves the loaded state; jco wraps that into a component of the WIT world
// `transform`.
// Everything runs offline. Usage: see USAGE below, or `node build.mjs --help`.

import { build } from 'esbuild';
import { componentNew, preview1AdapterReactorPath } from '@bytecodealliance/jco';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rename, rm, writeFile } from 'node:fs/promises';
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
 * runs now, once), then wrapped as a component with the WASI preview 1 adapter.
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
  const adapter = await readFile(preview1AdapterReactorPath());
  return withRevision(await componentNew(await readFile(initialised), [['wasi_snapshot_preview1', adapter]]));
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

main().catch((e) => {
  console.error(`build.mjs: ${e.message ?? e}`);
  process.exit(1);
});
