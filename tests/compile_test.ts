/**
 * `deno task compile` builds the single binary. `deno compile` needs a `denort` runtime that it downloads,
 * which this environment cannot reach, so the test runs only when DENORT_BIN points to a real denort.
 */
import assert from "node:assert/strict";
import { startFakeProvider } from "./fixtures/fake_openai.ts";
import { ROOT, runProcess, tempDir } from "./_harness.ts";

const denort = Deno.env.get("DENORT_BIN") ?? "";
const reason = denort === "" ? "DENORT_BIN is not set (deno compile cannot download denort here)" : null;
if (reason !== null) console.log(`compile test ignored: ${reason}`);

function run(command: string, args: string[], env: Record<string, string>, stdin = "") {
  return runProcess(command, args, { env, stdin });
}

Deno.test({
  name: "deno task compile builds mini-agent, which runs chat and demo with the baked-in permissions",
  ignore: reason !== null,
  async fn() {
    using dir = tempDir();
    const provider = startFakeProvider();
    try {
      const env = {
        DENORT_BIN: denort,
        OPENAI_BASE_URL: provider.url,
        AGENT_DB_PATH: `${dir.path}/s.db`,
        AGENT_TRACE_PATH: `${dir.path}/t.jsonl`,
      };
      const built = await run("deno", ["task", "compile"], env);
      assert.equal(built.code, 0, built.stderr);
      const binary = `${ROOT}/mini-agent`;
      const help = await run(binary, ["--help"], env);
      assert.equal(help.code, 0);
      assert.match(help.stdout, /chat/);
      const chat = await run(binary, ["chat"], env, "what is 12*(3+4)?\n");
      assert.equal(chat.code, 0, chat.stderr);
      assert.equal(chat.stdout, "The answer is 84.\n");
      const demo = await run(binary, ["demo"], env);
      assert.equal(demo.code, 0, demo.stdout + demo.stderr);
      assert.match(demo.stdout, /5\/5 phases passed/);
    } finally {
      await provider.close();
      await Deno.remove(`${ROOT}/mini-agent`).catch(() => {});
    }
  },
});
