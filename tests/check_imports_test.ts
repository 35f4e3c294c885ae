/**
 * scripts/check_imports.ts on tiny projects in a temp folder: a circle of imports (a type-only one counts)
 * or an import against the layers of scripts/layers.json fails with each on a line; a project without either
 * passes silently; a module of src/ that no layer holds cannot be checked.
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";

const SCRIPT = fileURLToPath(new URL("../scripts/check_imports.ts", import.meta.url));

/** Writes `files` into a new temp folder and runs the script there on `entry`. */
async function checkProject(files: Record<string, string>, entry: string) {
  const dir = await Deno.makeTempDir({ prefix: "check_imports_" });
  try {
    for (const [name, text] of Object.entries(files)) {
      await Deno.mkdir(`${dir}/${name}`.replace(/\/[^/]*$/, ""), { recursive: true });
      await Deno.writeTextFile(`${dir}/${name}`, text);
    }
    const output = await new Deno.Command(Deno.execPath(), {
      args: ["run", "--no-prompt", "--allow-run=deno", "--allow-read", SCRIPT, entry],
      cwd: dir,
      stdin: "null",
    }).output();
    const decoder = new TextDecoder();
    return {
      code: output.code,
      stdout: decoder.decode(output.stdout),
      stderr: decoder.decode(output.stderr),
    };
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("check_imports exits 1 and prints each cycle, a type-only import included", async () => {
  const result = await checkProject({
    "main.ts": 'import { a } from "./lib/a.ts";\nimport "./lib/c.ts";\nconsole.log(a);\n',
    "lib/a.ts": 'import type { B } from "./b.ts";\nexport const a: B = 1;\n',
    "lib/b.ts": 'import { a } from "./a.ts";\nexport type B = number;\nexport const b = a;\n',
    "lib/c.ts": 'import "./d.ts";\nexport const c = 1;\n',
    "lib/d.ts": 'import "./c.ts";\nexport const d = 1;\n',
  }, "main.ts");
  assert.equal(result.stdout, "lib/a.ts -> lib/b.ts -> lib/a.ts\nlib/c.ts -> lib/d.ts -> lib/c.ts\n");
  assert.equal(result.code, 1, result.stderr);
});

Deno.test("check_imports exits 0 printing nothing when no module imports its way back", async () => {
  const result = await checkProject({
    "main.ts": 'import { a } from "./a.ts";\nimport { b } from "./b.ts";\nconsole.log(a, b);\n',
    "a.ts": 'import type { B } from "./b.ts";\nexport const a: B = 1;\n',
    "b.ts": "export type B = number;\nexport const b = 2;\n",
  }, "main.ts");
  assert.equal(result.stdout, "");
  assert.equal(result.code, 0, result.stderr);
});

Deno.test("check_imports exits 2 naming the module it cannot load, since a graph with a hole proves nothing", async () => {
  const result = await checkProject({ "main.ts": 'import "./missing.ts";\n' }, "main.ts");
  assert.equal(result.code, 2);
  assert.equal(result.stdout, "");
  assert.match(result.stderr, /^Cannot read the module graph of main\.ts: Module not found ".*missing\.ts"/);
});

const LAYERS = JSON.stringify({
  layers: [
    { name: "base", units: ["src/types.ts"] },
    { name: "store", units: ["src/store"] },
    { name: "surfaces", units: ["src/http", "src/cli"], apart: true },
    { name: "main", units: ["src/main.ts"] },
  ],
});

Deno.test("check_imports exits 1 naming each import against scripts/layers.json: upward, or between units kept apart", async () => {
  const result = await checkProject({
    "scripts/layers.json": LAYERS,
    "src/main.ts": 'import "./http/route.ts";\nimport "./cli/chat.ts";\n',
    "src/types.ts": 'import type { Row } from "./store/row.ts";\nexport type Id = Row;\n',
    "src/store/row.ts": "export type Row = string;\n",
    "src/http/route.ts": 'import "../cli/chat.ts";\nimport "../store/row.ts";\n',
    "src/cli/chat.ts": 'import "../types.ts";\nexport const chat = 1;\n',
  }, "src/main.ts");
  assert.equal(
    result.stdout,
    "src/http/route.ts -> src/cli/chat.ts: src/http imports src/cli, another unit of surfaces, whose units stay apart\n" +
      "src/types.ts -> src/store/row.ts: base imports store, a layer above it\n",
  );
  assert.equal(result.code, 1, result.stderr);
});

Deno.test("check_imports exits 0 when every import goes down the layers, and 2 naming a module of src/ in no layer", async () => {
  const files = {
    "scripts/layers.json": LAYERS,
    "src/main.ts": 'import "./http/route.ts";\n',
    "src/http/route.ts": 'import "../store/row.ts";\nimport "./other.ts";\n',
    "src/http/other.ts": "export const other = 1;\n",
    "src/store/row.ts": 'import "../types.ts";\nexport type Row = string;\n',
    "src/types.ts": "export type Id = string;\n",
  };
  const good = await checkProject(files, "src/main.ts");
  assert.equal(good.stdout, "");
  assert.equal(good.code, 0, good.stderr);
  const placeless = await checkProject({
    ...files,
    "src/store/row.ts": 'import "../session/queue.ts";\nexport type Row = string;\n',
    "src/session/queue.ts": "export const queue = 1;\n",
  }, "src/main.ts");
  assert.equal(placeless.code, 2);
  assert.match(placeless.stderr, /^src\/session\/queue\.ts is in no layer of scripts\/layers\.json/);
});
