#!/usr/bin/env node
// check-generated regenerates src/gen into a scratch directory (buf
// generate, the plugins of node_modules) and fails when it differs from
// the committed src/gen: run `npm run generate` and commit the result.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
const out = mkdtempSync(join(tmpdir(), "idmint-ts-gen-"));

function files(dir) {
  return readdirSync(dir).flatMap((n) => {
    const p = join(dir, n);
    return statSync(p).isDirectory() ? files(p) : [p];
  });
}

try {
  // The template's out (src/gen) is rewritten to the scratch directory.
  const template = readFileSync(join(root, "buf.gen.yaml"), "utf8").replace(/out: src\/gen/g, `out: ${join(out, "gen")}`);
  const tpl = join(out, "buf.gen.yaml");
  writeFileSync(tpl, template);
  execFileSync(join(root, "node_modules/.bin/buf"), ["generate", "--template", tpl], { cwd: root, stdio: "inherit" });
  const want = join(root, "src/gen");
  const got = join(out, "gen");
  const names = new Set([...files(want).map((f) => relative(want, f)), ...files(got).map((f) => relative(got, f))]);
  const stale = [...names].filter((n) => {
    try {
      return readFileSync(join(want, n), "utf8") !== readFileSync(join(got, n), "utf8");
    } catch {
      return true;
    }
  });
  if (stale.length > 0) {
    console.error(`src/gen is stale (${stale.join(", ")}): run npm run generate and commit it`);
    process.exit(1);
  }
  console.error("src/gen is what buf generate makes of the schema");
} finally {
  rmSync(out, { recursive: true, force: true });
}
