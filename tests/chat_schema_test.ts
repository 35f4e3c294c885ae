/**
 * `deno task chat --schema FILE "message"` as a subprocess, with the task's own permissions and a fake
 * provider: the checked JSON on stdout and exit 0, or nothing on stdout, the errors on stderr and exit 1; the
 * schema read from stdin with `--schema -`; the file named is granted alone, wherever it is; a file that is
 * missing or no schema is exit 2.
 */
import assert from "node:assert/strict";
import { startFakeProvider } from "./fixtures/fake_openai.ts";
import { childEnv, runProcess, tempDir } from "./_harness.ts";
import { taskPermissionFlags } from "../src/permissions.ts";
import { namedFiles } from "../src/cli/command_line.ts";

const SCHEMA = {
  type: "object",
  properties: { city: { type: "string" }, population: { type: "integer" } },
  required: ["city", "population"],
};
const CITY = '{"city":"Lyon","population":522250}';

function chat(args: string[], stdin: string, env: Record<string, string>) {
  return runProcess("deno", ["task", "--quiet", "chat", ...args], { env, stdin, clearEnv: true });
}

Deno.test("deno task chat --schema prints the checked JSON and exits 0, or exits 1 with the errors", async () => {
  using dir = tempDir();
  const provider = startFakeProvider();
  try {
    const env = childEnv(dir.path, { OPENAI_BASE_URL: provider.url });
    Deno.mkdirSync(`${dir.path}/db`, { recursive: true });
    const file = `${dir.path}/db/city.json`;
    Deno.writeTextFileSync(file, JSON.stringify(SCHEMA));

    const valid = await chat(["--schema", file, `say: ${CITY}`], "", env);
    assert.equal(valid.code, 0, valid.stderr);
    assert.equal(valid.stdout, `${CITY}\n`);
    const sent = provider.requests.at(-1)!;
    assert.deepEqual(sent.response_format, {
      type: "json_schema",
      json_schema: { name: "city", schema: SCHEMA },
    });

    // The fake model answers the repair request with an echo: still no JSON.
    const invalid = await chat(["--schema", file, 'say: {"city":"Lyon"}'], "", env);
    assert.equal(invalid.code, 1, invalid.stderr);
    assert.equal(invalid.stdout, "\n", "an answer not in the format is not printed");
    assert.match(
      invalid.stderr,
      /the answer does not match the response format, even after a repair request:/,
    );
    assert.match(invalid.stderr, /- \$: the answer is not JSON/);
    const repair = (provider.requests.at(-1)!.messages as { content: string }[]).at(-1)!.content;
    assert.match(repair, /\$\.population: required property is missing/);

    const piped = await chat(["--schema", "-", `say: ${CITY}`], JSON.stringify(SCHEMA), env);
    assert.equal(piped.code, 0, piped.stderr);
    assert.equal(piped.stdout, `${CITY}\n`);
    const named = provider.requests.at(-1)!.response_format as { json_schema: { name: string } };
    assert.equal(named.json_schema.name, "response");
  } finally {
    await provider.close();
  }
});

Deno.test("deno task chat --schema reads the file it names outside the data folders, granted that file alone", async () => {
  using dir = tempDir();
  using outside = tempDir();
  const provider = startFakeProvider();
  try {
    const env = childEnv(dir.path, { OPENAI_BASE_URL: provider.url });
    const file = `${outside.path}/city.json`;
    Deno.writeTextFileSync(file, JSON.stringify(SCHEMA));
    const read = await chat(["--schema", file, `say: ${CITY}`], "", env);
    assert.equal(read.code, 0, read.stderr);
    assert.equal(read.stdout, `${CITY}\n`);
    // The grant is that one file, not its folder.
    const reads = taskPermissionFlags(env, { files: namedFiles(["chat", "--schema", file]) })
      .find((flag) => flag.startsWith("--allow-read="))!.slice("--allow-read=".length).split(",");
    assert.ok(reads.includes(file), reads.join());
    assert.ok(!reads.includes(outside.path), reads.join());
  } finally {
    await provider.close();
  }
});

Deno.test("deno task chat --schema exits 2 for a file that does not exist, one that is no schema, or two stdins", async () => {
  using dir = tempDir();
  const env = childEnv(dir.path, { OPENAI_BASE_URL: "http://127.0.0.1:9/v1" });
  Deno.mkdirSync(`${dir.path}/db`, { recursive: true });
  Deno.writeTextFileSync(`${dir.path}/db/bad.json`, '{"type": "objekt"}');
  Deno.writeTextFileSync(`${dir.path}/db/prose.json`, "an object with a city");
  const cases: [string[], string, RegExp][] = [
    [
      ["--schema", `${dir.path}/db/none.json`, "hi"],
      "",
      /^Cannot read --schema .*none\.json: .*No such file/m,
    ],
    [
      ["--schema", `${dir.path}/db/bad.json`, "hi"],
      "",
      /^Cannot use --schema .*bad\.json: it is not a JSON Schema the runtime can check answers against: #\/type: expected one of object/m,
    ],
    [
      ["--schema", `${dir.path}/db/prose.json`, "hi"],
      "",
      /^Cannot use --schema .*prose\.json: it is not JSON/m,
    ],
    [["--schema", "-", "-"], "{}", /^Cannot read both --schema - and the message - from stdin/m],
  ];
  for (const [args, stdin, message] of cases) {
    const result = await chat(args, stdin, env);
    assert.equal(result.code, 2, `${args.join(" ")}: ${result.stderr}`);
    assert.match(result.stderr, message);
    assert.equal(result.stdout, "");
  }
});
