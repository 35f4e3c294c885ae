/**
 * `deno task compile` builds the single binary. `deno compile` needs a `denort` runtime that it downloads,
 * which this environment cannot reach, so the test runs only when DENORT_BIN points to a real denort.
 */
import assert from "node:assert/strict";
import { startFakeProvider } from "./fixtures/fake_openai.ts";
import { ROOT, runProcess, tempDir } from "./_harness.ts";
import { freePort } from "../scripts/_bench_process.ts";

const denort = Deno.env.get("DENORT_BIN") ?? "";
const reason = denort === "" ? "DENORT_BIN is not set (deno compile cannot download denort here)" : null;
if (reason !== null) console.log(`compile test ignored: ${reason}`);

/** The settings that name data paths, unset: the defaults (data/…) are relative. */
const DEFAULT_PATHS = { AGENT_DB_PATH: "", AGENT_TRACE_PATH: "", AGENT_HISTORY_PATH: "" };

Deno.test({
  name:
    "deno task compile builds mini-agent for the settings it is given; run from another folder it keeps " +
    "its data there and answers a one-shot from the loopback model",
  ignore: reason !== null,
  async fn() {
    using dir = tempDir();
    const provider = startFakeProvider();
    const binary = `${dir.path}/mini-agent`;
    try {
      // The target's settings: its model's URL; data paths left to their relative defaults.
      const settings = { OPENAI_BASE_URL: provider.url, ...DEFAULT_PATHS };
      const built = await runProcess("deno", ["task", "compile"], {
        env: { DENORT_BIN: denort, ...settings },
      });
      assert.equal(built.code, 0, built.stderr);
      Deno.renameSync(`${ROOT}/mini-agent`, binary);
      const work = `${dir.path}/work`;
      Deno.mkdirSync(work);

      const help = await runProcess(binary, ["--help"], { cwd: work, env: settings });
      assert.equal(help.code, 0, help.stderr);
      assert.match(help.stdout, /chat/);
      const chat = await runProcess(binary, ["chat", "what is 12*(3+4)?"], { cwd: work, env: settings });
      assert.equal(chat.code, 0, chat.stderr);
      assert.equal(chat.stdout, "The answer is 84.\n");
      assert.equal(provider.requests.length, 2, "the calculator call and the answer");
      // data/ of the working directory, resolved when the binary runs, not the build machine's folder.
      assert.ok(Deno.statSync(`${work}/data/sessions.db`).isFile);
      assert.ok(Deno.statSync(`${work}/data/traces.jsonl`).isFile);

      // Another model host than the one it was compiled for: one line saying so, before any work.
      const other = await runProcess(binary, ["chat", "hi"], {
        cwd: work,
        env: { ...settings, OPENAI_BASE_URL: `http://127.0.0.1:${freePort()}/v1` },
      });
      assert.equal(other.code, 2);
      assert.match(
        other.stderr,
        /^Cannot start: missing permission --allow-net=127\.0\.0\.1:\d+ \(this binary was compiled for other settings: run deno task compile with these\)\n$/,
      );

      const demo = await runProcess(binary, ["demo"], { cwd: work, env: settings });
      assert.equal(demo.code, 0, demo.stdout + demo.stderr);
      assert.match(demo.stdout, /5\/5 phases passed/);
    } finally {
      await provider.close();
      await Deno.remove(`${ROOT}/mini-agent`).catch(() => {});
    }
  },
});
