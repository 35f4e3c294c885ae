/**
 * Resumable turns across two `serve` replicas on one database: a client that lost a turn's stream on one
 * replica reconnects with `Last-Event-ID` to the other and gets the rest of the run, each event once; a
 * cancel sent to the other replica stops the turn where it runs (through the session's lease).
 */
import assert from "node:assert/strict";
import { startFakeProvider } from "./fixtures/fake_openai.ts";
import { tempDir } from "./_harness.ts";
import { type ReplicaBackend, replicaBackends, startReplicas } from "./_replicas.ts";
import { FrameReader } from "./_sse_frames.ts";

const BACKENDS = await replicaBackends();

/** A resumable SSE turn of `message` on session `session` of the replica at `url`. */
function postTurn(url: string, session: string, message: string): Promise<Response> {
  return fetch(`${url}/v1/sessions/${session}/messages`, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "text/event-stream", prefer: "resumable" },
    body: JSON.stringify({ message }),
  });
}

/** Runs `fn` on two replicas of `backend` whose provider holds streamed answers after their first word. */
async function withTwoReplicas(
  backend: ReplicaBackend,
  fn: (a: string, b: string, release: () => void) => Promise<void>,
): Promise<void> {
  using dir = tempDir();
  const provider = startFakeProvider();
  let release!: () => void;
  provider.hold = new Promise<void>((resolve) => (release = resolve));
  // Renewed every 0.5 s: a cancel sent to the other replica is seen within that.
  const env = { OPENAI_BASE_URL: provider.url, AGENT_SESSION_LEASE_SECONDS: "1.5" };
  const [a, b] = await startReplicas(2, backend, dir.path, { env });
  try {
    await fn(a.url, b.url, release);
  } finally {
    release();
    await a.serve.stop();
    await b.serve.stop();
    await provider.close();
  }
}

for (const { name, ignore, make } of BACKENDS) {
  Deno.test({
    name:
      `a client that lost a turn's stream on one replica resumes it on the other (${name}): the rest, each once`,
    ignore,
    async fn() {
      await withTwoReplicas(await make(), async (a, b, release) => {
        const response = await postTurn(a, "resume", "say: one two three four");
        assert.equal(response.status, 200);
        const runId = response.headers.get("x-run-id")!;
        const live = new FrameReader(response);
        await live.until((frame) => frame.event === "delta");
        await live.cancel();
        const seen = live.frames.filter((frame) => frame.id !== undefined);
        assert.deepEqual(seen.map((f) => `${f.id} ${f.event}`), ["0.1 run_start"]);

        const resumed = await fetch(`${b}/v1/sessions/resume/runs/${runId}/events`, {
          headers: { "last-event-id": seen.at(-1)!.id! },
        });
        assert.equal(resumed.status, 200);
        const follower = new FrameReader(resumed);
        release();
        const rest = await follower.rest();
        assert.deepEqual(rest.map((f) => `${f.id} ${f.event}`), [
          "0.2 llm_call",
          "0.3 answer",
          "0.4 run_end",
        ]);
        assert.equal((rest[1].data.data as { text: string }).text, "one two three four");
        assert.ok(rest.every((f) => f.data.run_id === runId));
        const session = await (await fetch(`${b}/v1/sessions/resume`)).json();
        assert.deepEqual(session.messages.map((m: { content: string }) => m.content), [
          "say: one two three four",
          "one two three four",
        ]);
      });
    },
  });

  Deno.test({
    name: `a cancel sent to the other replica stops the turn where it runs (${name}), taken back`,
    ignore,
    async fn() {
      await withTwoReplicas(await make(), async (a, b) => {
        const response = await postTurn(a, "stop", "say: never finished");
        const runId = response.headers.get("x-run-id")!;
        const live = new FrameReader(response);
        await live.until((frame) => frame.event === "delta");
        // The run_start may not have reached the table yet: the cancel waits for it (409 until then).
        let cancel: Response | undefined;
        for (let tries = 0; tries < 100 && cancel?.status !== 202; tries++) {
          await cancel?.body?.cancel();
          if (tries > 0) await new Promise((resolve) => setTimeout(resolve, 20));
          cancel = await fetch(`${b}/v1/sessions/stop/cancel?run_id=${runId}`, { method: "POST" });
        }
        assert.equal(cancel!.status, 202);
        assert.deepEqual(await cancel!.json(), { session_id: "stop", run_id: runId });
        const frames = await live.rest();
        assert.deepEqual(frames.filter((f) => f.id !== undefined).map((f) => `${f.id} ${f.event}`), [
          "0.1 run_start",
          "0.2 error",
          "0.3 run_end",
        ]);
        assert.equal((frames.at(-1)!.data.error as { code: string }).code, "turn_cancelled");
        const session = await (await fetch(`${b}/v1/sessions/stop`)).json();
        assert.deepEqual(session.messages, [], "the question is taken back");
        const again = await fetch(`${b}/v1/sessions/stop/cancel`, { method: "POST" });
        assert.equal(again.status, 409);
        assert.equal((await again.json()).error.code, "no_running_turn");
      });
    },
  });
}
