/**
 * The `serve` command as a subprocess against a provider whose answers stream forever: four concurrent
 * turns end with `too_large` at LLM_MAX_REPLY_BYTES, and the server's resident memory stays bounded
 * while they run and after they end.
 */
import assert from "node:assert/strict";
import { readTrace } from "../src/trace/trace.ts";
import { childEnv, SERVE_ARGS, spawnServe, tempDir } from "./_harness.ts";
import { endless, startFaultProvider } from "./fixtures/fault_provider.ts";

/** The most resident memory the server may use, in kB (300 MB). */
const RSS_LIMIT_KB = 300 * 1024;

/**
 * VmRSS of process `pid` in kB, or null once it is gone. Read through `cat`: Deno lets only `--allow-all`
 * read `/proc` itself, and the test task grants `--allow-run` but not that.
 */
async function residentKb(pid: number): Promise<number | null> {
  const { success, stdout } = await new Deno.Command("cat", {
    args: [`/proc/${pid}/status`],
    stdout: "piped",
    stderr: "null",
  }).output();
  const match = success ? /^VmRSS:\s+(\d+) kB$/m.exec(new TextDecoder().decode(stdout)) : null;
  return match === null ? null : Number(match[1]);
}

Deno.test({
  name:
    "serve keeps its memory under 300 MB while 4 turns stream endless answers, and ends each with too_large",
  ignore: Deno.build.os !== "linux",
  async fn() {
    using dir = tempDir();
    const provider = startFaultProvider([endless()], "repeat");
    const env = childEnv(dir.path, {
      NO_COLOR: "1",
      OPENAI_BASE_URL: provider.url,
      AGENT_PORT: "0",
      AGENT_STREAM: "true",
      LLM_MAX_REPLY_BYTES: "262144",
      // Generous, so the reply limit is what ends the turns.
      LLM_TIMEOUT_SECONDS: "600",
    });
    const serve = spawnServe(SERVE_ARGS, env);
    // Bounds the wait (never asserted as a time): a server that reads forever fails here, not hangs.
    const guard = new AbortController();
    const timer = setTimeout(() => guard.abort(new Error("the turns did not end within 120 s")), 120_000);
    let peakKb = 0;
    try {
      await serve.listening;
      assert.match(serve.stderr(), /listening on/, serve.stderr());
      const port = serve.port();
      let running = true;
      const sampler = (async () => {
        while (running) {
          const kb = await residentKb(serve.child.pid);
          if (kb !== null) peakKb = Math.max(peakKb, kb);
          if (peakKb > RSS_LIMIT_KB) guard.abort(new Error(`RSS reached ${peakKb} kB`));
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
      })();
      const turns = await Promise.all(
        [1, 2, 3, 4].map(async (i) => {
          const response = await fetch(`http://127.0.0.1:${port}/v1/sessions/mem-${i}/messages`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({ message: "tell me everything" }),
            signal: guard.signal,
          });
          return { status: response.status, body: await response.json() };
        }),
      ).finally(() => (running = false));
      await sampler;
      const after = await residentKb(serve.child.pid);
      assert.ok(after !== null, "the server is still running");
      peakKb = Math.max(peakKb, after);
      for (const turn of turns) {
        assert.equal(turn.status, 502, JSON.stringify(turn.body));
        assert.equal(turn.body.error.code, "llm_error");
        assert.match(turn.body.error.message, /too large: it went past the limit of 262144 bytes/);
      }
      assert.equal(provider.requests.length, 4, "too_large is never retried");
      assert.ok(peakKb < RSS_LIMIT_KB, `peak RSS ${peakKb} kB`);
    } finally {
      clearTimeout(timer);
      const code = await serve.stop();
      await provider.close();
      assert.equal(code, 0, serve.stderr());
    }
    const errors = readTrace(`${dir.path}/trace/traces.jsonl`, (e) => e.event === "error");
    assert.deepEqual(errors.map((e) => e.data.kind), ["too_large", "too_large", "too_large", "too_large"]);
  },
});
