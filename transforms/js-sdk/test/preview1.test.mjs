// The WASI preview 1 functions that build.mjs merges into the runtime (PREVIEW1), run in Node
// against stand-ins for the WASI 0.2 functions they call: what hookgate's host would answer, with
// each call recorded; and how build.mjs reads the merged module's imports and strips its exports.
// Run by tests/it/js/preview1.rs (`node --test`).

import { parse } from '@bytecodealliance/jco';
import assert from 'node:assert/strict';
import test from 'node:test';

import { PREVIEW1, importsOf, withoutExports } from '../build.mjs';

const WASM = await parse(PREVIEW1);

const SCRATCH = 1024;
const STDOUT = 11;
const STDERR = 12;
const U64 = 2n ** 64n;

/**
 * An instance of PREVIEW1 with stand-in imports. `failWrite(call)` may answer a write's result:
 * `{ error: handle }` (last-operation-failed) or `{ closed: true }`.
 */
async function shim({ failWrite = () => undefined, draws = [], wall = [0n, 0], monotonic = 0n } = {}) {
  const memory = new WebAssembly.Memory({ initial: 2 });
  const calls = { writes: [], dropped: [], errorsDropped: [], draws: 0, exits: [], scratch: 0 };
  const view = () => new DataView(memory.buffer);
  const imports = {
    main: {
      memory,
      hookgate_preview1_scratch: () => {
        calls.scratch++;
        return SCRATCH;
      },
    },
    'wasi:random/random@0.2.3': {
      'get-random-u64': () => BigInt.asIntN(64, draws[calls.draws++] ?? 0n),
    },
    'wasi:clocks/wall-clock@0.2.3': {
      now: (at) => {
        view().setBigUint64(at, wall[0], true);
        view().setUint32(at + 8, wall[1], true);
      },
    },
    'wasi:clocks/monotonic-clock@0.2.3': { now: () => BigInt.asIntN(64, monotonic) },
    'wasi:cli/stdout@0.2.3': { 'get-stdout': () => STDOUT },
    'wasi:cli/stderr@0.2.3': { 'get-stderr': () => STDERR },
    'wasi:io/streams@0.2.3': {
      '[method]output-stream.blocking-write-and-flush': (stream, ptr, len, at) => {
        assert.equal(at, SCRATCH, 'results are lowered into the static scratch buffer');
        const bytes = Buffer.from(new Uint8Array(memory.buffer, ptr, len));
        calls.writes.push({ stream, bytes });
        const failure = failWrite(calls.writes.length);
        new Uint8Array(memory.buffer, at, 16).fill(0xee);
        if (!failure) return view().setUint8(at, 0);
        view().setUint8(at, 1);
        if (failure.closed) return view().setUint8(at + 4, 1);
        view().setUint8(at + 4, 0);
        view().setUint32(at + 8, failure.error, true);
      },
      '[resource-drop]output-stream': (stream) => calls.dropped.push(stream),
    },
    'wasi:io/error@0.2.3': { '[resource-drop]error': (error) => calls.errorsDropped.push(error) },
    'wasi:cli/exit@0.2.3': {
      exit: (status) => {
        calls.exits.push(status);
        throw new Error('exited');
      },
    },
  };
  const { instance } = await WebAssembly.instantiate(WASM, imports);
  return { exports: instance.exports, memory, view, calls };
}

/** Lays out `lengths.length` buffers of `fill` bytes at 4096 and their iovecs at 64. */
function iovecs(view, lengths) {
  let at = 4096;
  lengths.forEach((len, i) => {
    new Uint8Array(view().buffer, at, len).fill(0x61 + i);
    view().setUint32(64 + 8 * i, at, true);
    view().setUint32(64 + 8 * i + 4, len, true);
    at += len;
  });
  return { iovs: 64, count: lengths.length };
}

test('fd_write writes each iovec in chunks of at most 4096 bytes and counts them', async () => {
  const { exports, view, calls } = await shim();
  const { iovs, count } = iovecs(view, [9000, 0, 1000]);
  assert.equal(exports.fd_write(2, iovs, count, 32), 0);
  assert.deepEqual(calls.writes.map((w) => [w.stream, w.bytes.length]), [
    [STDERR, 4096], [STDERR, 4096], [STDERR, 808], [STDERR, 1000],
  ]);
  assert.ok(calls.writes.slice(0, 3).every((w) => w.bytes.every((b) => b === 0x61)));
  assert.ok(calls.writes[3].bytes.every((b) => b === 0x63));
  assert.equal(view().getUint32(32, true), 10000);
  assert.deepEqual(calls.dropped, [STDERR]);
  assert.equal(exports.fd_write(1, iovs, 1, 32), 0);
  assert.equal(calls.writes.at(-1).stream, STDOUT);
});

test('a failed write answers EIO with the bytes written before it, and drops its error', async () => {
  const { exports, view, calls } = await shim({ failWrite: (n) => (n === 2 ? { error: 77 } : undefined) });
  const { iovs, count } = iovecs(view, [9000, 1000]);
  assert.equal(exports.fd_write(1, iovs, count, 32), 29);
  assert.equal(calls.writes.length, 2);
  assert.equal(view().getUint32(32, true), 4096);
  assert.deepEqual(calls.errorsDropped, [77]);
  assert.deepEqual(calls.dropped, [STDOUT]);
});

test('a closed stream answers EIO and has no error to drop', async () => {
  const { exports, view, calls } = await shim({ failWrite: () => ({ closed: true }) });
  const { iovs, count } = iovecs(view, [10]);
  assert.equal(exports.fd_write(2, iovs, count, 32), 29);
  assert.equal(view().getUint32(32, true), 0);
  assert.deepEqual(calls.errorsDropped, []);
  assert.deepEqual(calls.dropped, [STDERR]);
});

test('fd_write to anything but stdout and stderr is EBADF and calls nothing', async () => {
  const { exports, view, calls } = await shim();
  const { iovs, count } = iovecs(view, [10]);
  for (const fd of [0, 3, -1]) assert.equal(exports.fd_write(fd, iovs, count, 32), 8);
  assert.deepEqual([calls.writes, calls.dropped, calls.scratch], [[], [], 0]);
});

test('random_get fills whole words, then the tail from one more draw', async () => {
  const draws = [0x0807060504030201n, 0x100f0e0d0c0b0a09n, 0x1817161514131211n];
  const { exports, memory, calls } = await shim({ draws });
  const bytes = () => [...new Uint8Array(memory.buffer, 200, 16)];
  new Uint8Array(memory.buffer, 200, 16).fill(0xff);
  assert.equal(exports.random_get(200, 13), 0);
  assert.deepEqual(bytes(), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 0xff, 0xff, 0xff]);
  assert.equal(calls.draws, 2);
  assert.equal(exports.random_get(200, 0), 0);
  assert.equal(calls.draws, 2, 'no bytes, no draw');
  assert.equal(exports.random_get(200, 8), 0);
  assert.equal(calls.draws, 3, 'a whole word, one draw');
  assert.deepEqual(bytes().slice(0, 8), [0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18]);
});

test('clock_time_get reads the wall clock in nanoseconds and the monotonic clock', async () => {
  const wall = [1_700_000_000n, 123_456_789];
  const { exports, view, calls } = await shim({ wall, monotonic: U64 - 5n });
  assert.equal(exports.clock_time_get(0, 1000n, 48), 0);
  assert.equal(view().getBigUint64(48, true), 1_700_000_000_123_456_789n);
  assert.equal(calls.scratch, 1);
  assert.equal(exports.clock_time_get(1, 1000n, 48), 0);
  assert.equal(view().getBigUint64(48, true), U64 - 5n);
  for (const id of [2, 3]) assert.equal(exports.clock_time_get(id, 0n, 48), 28);
});

test('proc_exit exits with ok for 0 and err for anything else, and the rest answer as loading left them', async () => {
  const { exports, view, calls } = await shim();
  assert.throws(() => exports.proc_exit(0), /exited/);
  assert.throws(() => exports.proc_exit(3), /exited/);
  assert.deepEqual(calls.exits, [0, 1]);
  view().setUint32(8, 9, true);
  view().setUint32(12, 9, true);
  assert.equal(exports.environ_sizes_get(8, 12), 0);
  assert.deepEqual([view().getUint32(8, true), view().getUint32(12, true)], [0, 0]);
  assert.equal(exports.environ_get(8, 12), 0);
  assert.equal(exports.fd_close(3), 8);
  assert.equal(exports.fd_fdstat_get(0, 8), 8);
  assert.equal(exports.fd_read(0, 8, 1, 12), 8);
  assert.equal(exports.fd_seek(0, 0n, 0, 8), 8);
});

test('the merged module\'s imports are listed, and only the named exports are stripped', async () => {
  const module = Buffer.from(await parse(`(module
    (type $t (func (param i32) (result i32)))
    (import "wasi_snapshot_preview1" "fd_pwrite" (func (param i32 i32 i32 i64 i32) (result i32)))
    (import "env" "table" (table 1 funcref))
    (import "env" "memory" (memory 1 2))
    (import "env" "global" (global (mut i32)))
    (import "wasi_snapshot_preview1" "path_open" (func (type $t)))
    (func (export "random_get") (param i32 i32) (result i32) i32.const 0)
    (func (export "kept") (result i32) i32.const 7)
    (func (export "hookgate_preview1_scratch") (result i32) i32.const 16))`));
  assert.deepEqual(importsOf(module), [
    ['wasi_snapshot_preview1', 'fd_pwrite'], ['env', 'table'], ['env', 'memory'], ['env', 'global'],
    ['wasi_snapshot_preview1', 'path_open'],
  ]);
  const stripped = withoutExports(module, new Set(['random_get', 'hookgate_preview1_scratch']));
  const compiled = new WebAssembly.Module(stripped);
  assert.deepEqual(WebAssembly.Module.exports(compiled).map((e) => e.name), ['kept']);
  assert.equal(WebAssembly.Module.imports(compiled).length, 5);
});
