#!/usr/bin/env node
// Builds a hookgate transform component from a JavaScript or TypeScript module:
// esbuild bundles adapter.js with the module (and whatever it imports from npm) into one ES
// module, and ComponentizeJS compiles that into a component of the WIT world `transform`.
// Everything runs offline. Usage: see USAGE below, or `node build.mjs --help`.

import { build } from 'esbuild';
import { componentize } from '@bytecodealliance/componentize-js';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, dirname, extname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = dirname(fileURLToPath(import.meta.url));

const USAGE = `usage: node build.mjs <module.mjs|.js|.ts> [-o out.wasm] [--wit DIR] [--allow-fetch]
       npm run build -- <module> -o <out.wasm>     (from transforms/js-sdk)

  -o FILE        the component to write (default: <module name>.wasm); written aside and
                 renamed over FILE, so building into a live transforms directory is safe
  --wit DIR      hookgate's WIT directory (default: ${join(HERE, '..', '..', 'wit')})
  --allow-fetch  TESTING ONLY: keep the engine's HTTP support and the real fetch(). The
                 component then imports wasi:http, and hookgate refuses to load it; this
                 exists only to test that refusal.
  -h, --help     this text

The export a mapping names in transform.export, else the module's default export, else its
export \`transform\`, is called as fn({ payload, headers, url, path }, ctx); see README.md.`;

// When run as `npm run build` here, npm changes into this directory; paths the user typed are
// relative to where they typed them, which npm passes on as INIT_CWD.
const USER_CWD =
  process.env.npm_package_name === '@hookgate/transform-sdk' && process.env.INIT_CWD
    ? process.env.INIT_CWD
    : process.cwd();

function parseArgs(argv) {
  const opts = { entry: undefined, out: undefined, wit: join(HERE, '..', '..', 'wit'), allowFetch: false };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const value = () => argv[++i] ?? fail(`${arg} needs a value`);
    if (arg === '-h' || arg === '--help') {
      console.log(USAGE);
      process.exit(0);
    } else if (arg === '-o' || arg === '--out') opts.out = resolve(USER_CWD, value());
    else if (arg === '--wit') opts.wit = resolve(USER_CWD, value());
    else if (arg === '--allow-fetch') opts.allowFetch = true;
    else if (arg.startsWith('-')) fail(`unknown option ${arg}`);
    else if (opts.entry) fail(`one module at a time (got ${opts.entry} and ${arg})`);
    else opts.entry = resolve(USER_CWD, arg);
  }
  if (!opts.entry) fail('which module? (the first argument)');
  if (!existsSync(opts.entry)) fail(`no such module: ${opts.entry}`);
  if (!existsSync(opts.wit)) fail(`no WIT directory at ${opts.wit} (use --wit DIR)`);
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

/** Options shared by both esbuild passes. TypeScript needs nothing more: esbuild strips types. */
function esbuildCommon() {
  return {
    bundle: true,
    format: 'esm',
    platform: 'neutral', // no Node built-ins: the engine is not Node
    mainFields: ['module', 'main'],
    target: 'es2022',
    external: ['hookgate:*'], // hookgate's own imports (`log`), wired by ComponentizeJS
    logLevel: 'warning',
  };
}

/** One ES module: the adapter importing the user's module as 'user-module'. */
async function bundle(entry, allowFetch, outfile) {
  await build({
    ...esbuildCommon(),
    entryPoints: [join(HERE, 'adapter.js')],
    outfile,
    alias: { 'user-module': entry },
    define: { __HOOKGATE_STUB_FETCH__: String(!allowFetch) },
    // The adapter reads `default` and `transform` from the module; one of them is missing.
    logOverride: { 'import-is-undefined': 'silent' },
  });
}

async function compile(sourcePath, witPath, allowFetch) {
  const { component } = await componentize({
    sourcePath,
    witPath,
    worldName: 'transform',
    // The default engine carries fetch() over wasi:http, which hookgate does not grant; without
    // this the component imports wasi:http and is refused at load. (No enableAot: it would
    // download weval at build time.)
    disableFeatures: allowFetch ? [] : ['http', 'fetch-event'],
  });
  return component;
}

/** Writes aside and renames, so that a watcher never sees half a component. */
async function writeAtomically(path, bytes) {
  await mkdir(dirname(path), { recursive: true });
  const aside = `${path}.${process.pid}.tmp`;
  await writeFile(aside, bytes);
  await rename(aside, path);
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  if (opts.allowFetch) {
    console.error('build.mjs: WARNING: --allow-fetch builds a component that imports wasi:http; hookgate will refuse to load it (test use only)');
  }
  const work = await mkdtemp(join(tmpdir(), 'hookgate-js-'));
  try {
    const t0 = performance.now();
    await checkExports(opts.entry);
    const bundlePath = join(work, 'bundle.js');
    await bundle(opts.entry, opts.allowFetch, bundlePath);
    const t1 = performance.now();
    const component = await compile(bundlePath, opts.wit, opts.allowFetch);
    await writeAtomically(opts.out, component);
    const ms = (t) => `${Math.round(t)} ms`;
    console.error(`${opts.out}: ${component.length} bytes (bundle ${ms(t1 - t0)}, componentize ${ms(performance.now() - t1)})`);
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

main().catch((e) => {
  console.error(`build.mjs: ${e.message ?? e}`);
  process.exit(1);
});
