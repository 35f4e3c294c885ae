/**
 * scripts/check_cycles.ts on tiny projects in a temp folder: a circle of imports (a type-only one counts)
 * fails with each cycle on a line; a project without one passes silently.
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";

const SCRIPT = fileURLToPath(new URL("../scripts/check_cycles.ts", import.meta.url));

/** Writes `files` into a new temp folder and runs the script there on `entry`. */
async function checkProject(files: Record<string, string>, entry: string) {
  const dir = await Deno.makeTempDir({ prefix: "check_cycles_" });
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

Deno.test("check_cycles exits 1 and prints each cycle, a type-only import included", async () => {
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

Deno.test("check_cycles exits 0 printing nothing when no module imports its way back", async () => {
  const result = await checkProject({
    "main.ts": 'import { a } from "./a.ts";\nimport { b } from "./b.ts";\nconsole.log(a, b);\n',
    "a.ts": 'import type { B } from "./b.ts";\nexport const a: B = 1;\n',
    "b.ts": "export type B = number;\nexport const b = 2;\n",
  }, "main.ts");
  assert.equal(result.stdout, "");
  assert.equal(result.code, 0, result.stderr);
});

Deno.test("check_cycles exits 2 naming the module it cannot load, since a graph with a hole proves nothing", async () => {
  const result = await checkProject({ "main.ts": 'import "./missing.ts";\n' }, "main.ts");
  assert.equal(result.code, 2);
  assert.equal(result.stdout, "");
  assert.match(result.stderr, /^Cannot read the module graph of main\.ts: Module not found ".*missing\.ts"/);
});
