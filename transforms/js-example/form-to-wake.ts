// Example hookgate transform in TypeScript: a form submission (any flat JSON object, or one
// under `fields`) as a wake event listing its fields, sorted by name. An empty submission keeps
// the mapping's own action. Build: node ../js-sdk/build.mjs form-to-wake.ts -o dist/form-to-wake.wasm

/** What hookgate passes in (the contract of transforms/js-sdk/adapter.js). */
interface Input {
  payload: unknown; // the body as JSON, or null
  headers: Record<string, string>;
  url: URL;
  path: string;
}

interface Context {
  mappingId: string;
  config?: { form?: string };
  log(level: 'debug' | 'info' | 'warn' | 'error', message: string): void;
}

/** undefined: the mapping's own action; null: skip. */
type Result = { kind: 'wake'; text: string; mode?: 'now' | 'next-heartbeat' } | null | undefined;

type Fields = Record<string, unknown>;

const MAX_VALUE_CHARS = 80;
const MAX_FIELDS = 30;

export default function formToWake({ payload, path }: Input, ctx: Context): Result {
  const fields = formFields(payload);
  const names = Object.keys(fields).sort();
  if (names.length === 0) return undefined;
  const shown = names.slice(0, MAX_FIELDS).map((name) => `${name}=${truncate(valueText(fields[name]))}`);
  if (names.length > MAX_FIELDS) shown.push(`… ${names.length - MAX_FIELDS} more`);
  return { kind: 'wake', text: `Form ${ctx.config?.form ?? path}: ${shown.join(', ')}` };
}

/** The submitted fields: `payload.fields` when the form service nests them, else the payload. */
function formFields(payload: unknown): Fields {
  if (!isObject(payload)) return {};
  return isObject(payload.fields) ? payload.fields : payload;
}

function isObject(v: unknown): v is Fields {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function valueText(v: unknown): string {
  if (typeof v === 'string') return v;
  return JSON.stringify(v) ?? String(v);
}

function truncate(s: string): string {
  const flat = s.replace(/\s+/g, ' ').trim();
  return flat.length <= MAX_VALUE_CHARS ? flat : `${flat.slice(0, MAX_VALUE_CHARS - 1)}…`;
}
