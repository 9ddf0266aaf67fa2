// The AJV contender of the validation benchmark (peers_validation.rs), under Node.
//
// Usage: node validate_ajv.mjs FIXTURE NPM_DIR [--serve | --passes N]
//
// FIXTURE is the JSON the benchmark writes: {"request_key", "schema", "answers": [{"text",
// "valid"}]}; NPM_DIR holds the node_modules that install.sh made (ajv, ajv-formats). AJV is
// configured as the MCP TypeScript SDK's default validator configures it (strict: false,
// validateFormats: true, validateSchema: false, allErrors: true, ajv-formats added), and the
// schema is compiled once and reused. Each validation starts from an answer's JSON text:
// JSON.parse, the response-map shape checks of the guest (one key, only `action` and `content`,
// `accept`, object content), then the compiled validator.
//
// On start it prints one JSON line: the versions and its verdict on every answer. Then, with
// --serve, it reads commands "SUBSET PASSES" (SUBSET is all, valid or invalid) from stdin, one a
// line, and for each runs PASSES passes over that subset of the answers, timed as a whole with
// process.hrtime.bigint(), and prints one JSON line: {"subset", "n", "ns", "valid"}. Without
// --serve it warms up and runs one such batch of the whole mix (--passes, default 2000), prints
// it and exits.

import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { createInterface } from "node:readline";

const args = process.argv.slice(2);
if (args.length < 2) {
  console.error("usage: node validate_ajv.mjs FIXTURE NPM_DIR [--serve | --passes N]");
  process.exit(2);
}
const fixture = JSON.parse(readFileSync(args[0], "utf8"));
const require = createRequire(join(args[1], "package.json"));
const ajvModule = require("ajv");
const formatsModule = require("ajv-formats");
const Ajv = ajvModule.default ?? ajvModule;
const addFormats = formatsModule.default ?? formatsModule;

const ajv = new Ajv({
  strict: false,
  validateFormats: true,
  validateSchema: false,
  allErrors: true,
});
addFormats(ajv);
const validate = ajv.compile(fixture.schema);
const key = fixture.request_key;

function check(text) {
  let responses;
  try {
    responses = JSON.parse(text);
  } catch {
    return false;
  }
  if (responses === null || typeof responses !== "object" || Array.isArray(responses)) {
    return false;
  }
  const keys = Object.keys(responses);
  if (keys.length !== 1 || keys[0] !== key) {
    return false;
  }
  const response = responses[key];
  if (response === null || typeof response !== "object" || Array.isArray(response)) {
    return false;
  }
  for (const field of Object.keys(response)) {
    if (field !== "action" && field !== "content") {
      return false;
    }
  }
  if (response.action !== "accept") {
    return false;
  }
  const content = response.content;
  if (content === null || typeof content !== "object" || Array.isArray(content)) {
    return false;
  }
  return validate(content);
}

const texts = fixture.answers.map((a) => a.text);
const subsets = {
  all: texts,
  valid: fixture.answers.filter((a) => a.valid).map((a) => a.text),
  invalid: fixture.answers.filter((a) => !a.valid).map((a) => a.text),
};

function run(subset, passes) {
  const answers = subsets[subset];
  let valid = 0;
  const started = process.hrtime.bigint();
  for (let p = 0; p < passes; p++) {
    for (let i = 0; i < answers.length; i++) {
      if (check(answers[i])) {
        valid++;
      }
    }
  }
  const ns = Number(process.hrtime.bigint() - started);
  return { subset, n: passes * answers.length, ns, valid };
}

const version = (name) => require(`${name}/package.json`).version;
console.log(
  JSON.stringify({
    ready: true,
    runtime: `Node ${process.version}`,
    validator: `ajv ${version("ajv")} + ajv-formats ${version("ajv-formats")}`,
    verdicts: texts.map(check),
  }),
);

if (args.includes("--serve")) {
  const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of lines) {
    const parts = line.trim().split(/\s+/);
    if (parts.length < 2) {
      continue;
    }
    process.stdout.write(`${JSON.stringify(run(parts[0], Number(parts[1])))}\n`);
  }
} else {
  const at = args.indexOf("--passes");
  const passes = at >= 0 ? Number(args[at + 1]) : 2000;
  run("all", Math.max(1, Math.floor(passes / 4)));
  console.log(JSON.stringify(run("all", passes)));
}
