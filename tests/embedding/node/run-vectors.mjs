// Runs tests/embedding/vectors.json through the policy-only component transpiled by jco.
//
//   node node_modules/@bytecodealliance/jco/dist/jco.js transpile m3_policy.wasm -o <out> --name m3_policy
//   NODE_PATH=<install>/node_modules node run-vectors.mjs <out>/m3_policy.js vectors.json results.json
//
// Module resolution: the transpiled module imports bare `@bytecodealliance/preview2-shim/*`
// specifiers (jco's standard WASI mapping), and ES modules ignore NODE_PATH. So this script
// registers a resolve hook that first resolves normally (which works when <out> lies inside the
// install directory) and otherwise retries bare specifiers from each NODE_PATH entry (a
// `node_modules` directory). The hook also loads the transpiled `.js` as an ES module whatever
// package.json is (or is not) above it.
//
// Values (README "Values") map to jco's: record fields and function names in camelCase, variants
// `{tag, val}` and enums as kebab-case strings, `none` as `undefined`, lists and tuples as arrays.
// jco lowers 64-bit integers with `BigInt(value)`, so plain numbers are passed; 64-bit results
// come back as BigInt and are turned into numbers (failing above 2^53). A `result` return is the
// `ok` value, or a thrown `ComponentError` whose `payload` is the `err` value; which functions
// return a `result` is read from the WIT (../../../wit), as the transpiled module does not say.
//
// Exit status: 0 all vectors match, 1 some mismatch (one `MISMATCH` line each on stderr),
// 2 the runner failed (bad input, a trap or any other exception).

import { readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { register } from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const HOOKS = `
import path from 'node:path';
import { pathToFileURL } from 'node:url';
// Resolving from <dir>/parent.mjs looks in <dir>/node_modules, then in <dir>/../node_modules = <dir>.
const parents = (process.env.NODE_PATH ?? '').split(path.delimiter).filter(Boolean)
  .map((dir) => pathToFileURL(path.join(path.resolve(dir), 'parent.mjs')).href);
let entry;
export function initialize(data) { entry = data.entry; }
export async function resolve(specifier, context, next) {
  if (specifier === entry) return { ...(await next(specifier, context)), format: 'module' };
  try {
    return await next(specifier, context);
  } catch (error) {
    const bare = !/^[./]/.test(specifier) && !/^[a-z][a-z0-9+.-]*:/i.test(specifier);
    if (error?.code !== 'ERR_MODULE_NOT_FOUND' || !bare) throw error;
    for (const parentURL of parents) {
      try { return await next(specifier, { ...context, parentURL }); } catch {}
    }
    throw error;
  }
}
//# sourceURL=run-vectors-resolve-hook.mjs`;

const WIT_DIR = new URL('../../../wit/', import.meta.url);

const isObject = (v) => typeof v === 'object' && v !== null && !Array.isArray(v);
const camel = (name) => name.replace(/-(.)/g, (_, c) => c.toUpperCase());
const kebab = (name) => name.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);

// The module file: the argument itself, or the one `.js` file of a transpiled directory.
function modulePath(arg) {
  if (!statSync(arg).isDirectory()) return path.resolve(arg);
  const js = readdirSync(arg).filter((f) => f.endsWith('.js'));
  if (js.length !== 1) throw new Error(`${arg}: expected one .js module, found ${js.length}`);
  return path.resolve(arg, js[0]);
}

// `iface.fn` -> whether the WIT function returns a `result`.
function resultReturns() {
  const wit = readdirSync(WIT_DIR).filter((f) => f.endsWith('.wit'))
    .map((f) => readFileSync(new URL(f, WIT_DIR), 'utf8').replace(/\/\/.*$/gm, '')).join('\n');
  const returns = new Map();
  for (const [, iface, body] of wit.matchAll(/\binterface\s+([\w-]+)\s*\{([\s\S]*?)(?=\n\s*(?:interface|world)\s|$)/g)) {
    for (const [, fn, ret] of body.matchAll(/%?([\w-]+)\s*:\s*func\s*\([^)]*\)\s*(?:->\s*([^;]+))?;/g)) {
      returns.set(`${iface}.${fn}`, /^result\b/.test(ret?.trim() ?? ''));
    }
  }
  return returns;
}

// Replaces `{"$round"|"$record": name, "$patch"?: patch}` by the named entry, merge-patched.
function resolveRefs(value, tables) {
  if (Array.isArray(value)) return value.map((v) => resolveRefs(v, tables));
  if (!isObject(value)) return value;
  if ('$string' in value) return longString(value);
  const kind = ['$round', '$record'].filter((k) => k in value);
  if (kind.length === 0) {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, resolveRefs(v, tables)]));
  }
  const { [kind[0]]: name, $patch, ...rest } = value;
  if (kind.length > 1 || Object.keys(rest).length > 0) throw new Error(`bad reference ${JSON.stringify(value)}`);
  const table = kind[0] === '$round' ? tables.rounds : tables.records;
  if (!table || !Object.hasOwn(table, name)) throw new Error(`unknown ${kind[0]} ${JSON.stringify(name)}`);
  const base = resolveRefs(table[name], tables);
  return $patch === undefined ? base : mergePatch(base, resolveRefs($patch, tables));
}

// `{"$string": {prefix, repeat, times, suffix}}`: prefix + repeat * times + suffix.
function longString(value) {
  const spec = value.$string;
  const keys = isObject(spec) ? Object.keys(spec).sort().join() : '';
  if (Object.keys(value).length !== 1 || keys !== 'prefix,repeat,suffix,times') {
    throw new Error(`bad $string ${JSON.stringify(value).slice(0, 200)}`);
  }
  return spec.prefix + spec.repeat.repeat(spec.times) + spec.suffix;
}

// RFC 7386.
function mergePatch(target, patch) {
  if (!isObject(patch)) return patch;
  const out = isObject(target) ? { ...target } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k], v);
  }
  return out;
}

function toJs(value) {
  if (value === null) return undefined;
  if (Array.isArray(value)) return value.map(toJs);
  if (isObject(value)) return Object.fromEntries(Object.entries(value).map(([k, v]) => [camel(k), toJs(v)]));
  return value;
}

function fromJs(value) {
  if (value === undefined || value === null) return null;
  if (typeof value === 'bigint') {
    if (value > BigInt(Number.MAX_SAFE_INTEGER) || value < BigInt(Number.MIN_SAFE_INTEGER)) {
      throw new Error(`integer ${value} does not fit a JSON number exactly`);
    }
    return Number(value);
  }
  if (Array.isArray(value)) return value.map(fromJs);
  if (isObject(value)) return Object.fromEntries(Object.entries(value).map(([k, v]) => [kebab(k), fromJs(v)]));
  return value;
}

function matches(pattern, value) {
  if (Array.isArray(pattern)) {
    return Array.isArray(value) && value.length === pattern.length && pattern.every((p, i) => matches(p, value[i]));
  }
  if (isObject(pattern)) {
    return isObject(value) && Object.entries(pattern).every(([k, p]) => Object.hasOwn(value, k) && matches(p, value[k]));
  }
  return pattern === value;
}

function run(component, returnsResult, vector, tables) {
  const [iface, fn] = vector.call.split('.');
  const func = component[camel(iface)]?.[camel(fn ?? '')];
  if (typeof func !== 'function' || !returnsResult.has(vector.call)) throw new Error(`unknown call ${vector.call}`);
  const args = resolveRefs(vector.args, tables).map(toJs);
  if (args.length !== func.length) throw new Error(`${vector.call} takes ${func.length} arguments, got ${args.length}`);
  if (!returnsResult.get(vector.call)) return fromJs(func(...args));
  try {
    return { ok: fromJs(func(...args)) };
  } catch (error) {
    if (error?.constructor?.name !== 'ComponentError' || !Object.hasOwn(error, 'payload')) throw error;
    return { err: fromJs(error.payload) };
  }
}

function readVectors(vectorsPath) {
  const file = JSON.parse(readFileSync(vectorsPath, 'utf8'));
  if (file.format !== 1 || !Array.isArray(file.vectors)) throw new Error(`${vectorsPath}: not a format 1 vector file`);
  const ids = new Set();
  for (const v of file.vectors) {
    if (typeof v.id !== 'string' || ids.has(v.id)) throw new Error(`missing or duplicate vector id ${JSON.stringify(v.id)}`);
    if (typeof v.call !== 'string' || !Array.isArray(v.args) || !('expect' in v)) throw new Error(`vector ${v.id}: needs call, args and expect`);
    ids.add(v.id);
  }
  return file;
}

async function main([moduleArg, vectorsPath, outPath, ...extra]) {
  if (!outPath || extra.length > 0) throw new Error('usage: run-vectors.mjs <transpiled-dir-or-module> <vectors.json> <out.json>');
  const file = readVectors(vectorsPath);
  const returnsResult = resultReturns();
  const entry = pathToFileURL(modulePath(moduleArg)).href;
  register(`data:text/javascript,${encodeURIComponent(HOOKS)}`, import.meta.url, { data: { entry } });
  const component = await import(entry);

  const results = [];
  let mismatches = 0;
  for (const vector of file.vectors) {
    let result;
    try {
      result = run(component, returnsResult, vector, file);
    } catch (error) {
      throw new Error(`vector ${vector.id} (${vector.call}): ${error?.stack ?? error}`);
    }
    results.push({ id: vector.id, result });
    if (!matches(vector.expect, result)) {
      mismatches += 1;
      console.error(`MISMATCH ${vector.id}: expected ${JSON.stringify(vector.expect)} got ${JSON.stringify(result)}`);
    }
  }
  writeFileSync(outPath, `${JSON.stringify({ host: 'node', results }, null, 2)}\n`);
  console.log(`node: ${results.length} vectors, ${results.length - mismatches} matched, ${mismatches} mismatched`);
  return mismatches === 0 ? 0 : 1;
}

main(process.argv.slice(2)).then(
  (code) => { process.exitCode = code; },
  (error) => {
    console.error(`ERROR: ${error?.stack ?? error}`);
    process.exitCode = 2;
  },
);
