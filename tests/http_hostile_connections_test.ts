/**
 * Connections that send part of their request headers and then nothing: `serve` survives as many as its file
 * limit holds and more (Deno's accept loop fails with EMFILE; the server drains that listener and listens
 * again), and answers again once they close. One test on a real `serve` child with a low file limit, one
 * on `serveHttp` with a listener whose accept loop fails on cue.
 */
import assert from "node:assert/strict";
import { type Listen, serveHttp } from "../src/http/server.ts";
import { taskPermissionFlags } from "../src/permissions.ts";
import { childEnv, spawnServe, tempDir } from "./_harness.ts";
import { httpHarness, until } from "./_http_harness.ts";

/** The serve child's limit on open files, set with `prlimit` once it listens. */
const SERVE_FILE_LIMIT = 256;
/** Partial-header connections the attacker opens, in batches: several times what the child can hold. */
const ATTACK_CONNECTIONS = 3000;
const ATTACK_BATCH = 100;
/**
 * Batches the attacker tries at most. While serve listens again (100 ms after it drained), every connection
 * is refused at once, so the attack waits `REFUSED_PAUSE_MS` after a batch that opened none and goes on.
 */
const ATTACK_BATCHES_AT_MOST = 600;
const REFUSED_PAUSE_MS = 20;
/**
 * Tries of `/healthz` after the last attacking connection closed, 10 ms apart at least: a refused one (serve
 * listening again) fails at once. A count, not a time: a slow machine does not fail the test.
 */
const HEALTHZ_TRIES = 300;
/** A failsafe per try: a server that accepts and never answers fails the test instead of hanging it. */
const HEALTHZ_TRY_FAILSAFE_MS = 30_000;
const PARTIAL_REQUEST = new TextEncoder().encode("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ");

/** One connection that sent `PARTIAL_REQUEST`, or null when it was refused or reset on the way. */
async function partialConnection(port: number): Promise<Deno.TcpConn | null> {
  let conn: Deno.TcpConn | null = null;
  try {
    conn = await Deno.connect({ hostname: "127.0.0.1", port });
    await conn.write(PARTIAL_REQUEST);
    return conn;
  } catch {
    // Refused while the server listens again, or reset when a draining listener closed it: both expected.
    conn?.close();
    return null;
  }
}

/**
 * Polls `GET /healthz` until one answers 200, `tries` times at most; returns the status of the last attempt,
 * or the error that ended it.
 */
async function healthzAnswer(port: number, tries: number): Promise<string> {
  let last = "no attempt";
  for (let attempt = 0; attempt < tries; attempt++) {
    try {
      const signal = AbortSignal.timeout(HEALTHZ_TRY_FAILSAFE_MS);
      const response = await fetch(`http://127.0.0.1:${port}/healthz`, { signal });
      await response.body?.cancel();
      if (response.ok) return "200";
      last = String(response.status);
    } catch (error) {
      last = (error as Error).name;
    }
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return last;
}

Deno.test({
  name:
    "serve with 256 open files survives 3,000 partial-header connections and answers /healthz again once they close",
  ignore: Deno.build.os !== "linux",
  async fn() {
    using dir = tempDir();
    const env = childEnv(dir.path, {
      NO_COLOR: "1",
      // Never called: /healthz needs no model.
      OPENAI_BASE_URL: "http://127.0.0.1:9/v1",
      AGENT_PORT: "0",
    });
    const flags = taskPermissionFlags(env, { task: "serve" });
    const serve = spawnServe(["run", "--no-prompt", ...flags, "src/main.ts", "serve"], env);
    let exited = false;
    serve.child.status.then(() => (exited = true));
    try {
      await serve.listening;
      assert.match(serve.stderr(), /listening on/, serve.stderr());
      const port = serve.port();
      // After start-up: Deno raises its soft limit to the hard one when it starts, so `ulimit -S` would not do.
      const limit = await new Deno.Command("prlimit", {
        args: ["--pid", String(serve.child.pid), `--nofile=${SERVE_FILE_LIMIT}:${SERVE_FILE_LIMIT}`],
        stdout: "null",
        stderr: "piped",
      }).output();
      assert.ok(limit.success, `prlimit failed: ${new TextDecoder().decode(limit.stderr)}`);
      const held: Deno.TcpConn[] = [];
      try {
        for (
          let batches = 0;
          held.length < ATTACK_CONNECTIONS && batches < ATTACK_BATCHES_AT_MOST;
          batches++
        ) {
          if (exited) break;
          const batch = await Promise.all(
            Array.from({ length: ATTACK_BATCH }, () => partialConnection(port)),
          );
          const opened = batch.filter((conn) => conn !== null);
          held.push(...opened);
          if (opened.length === 0) await new Promise((resolve) => setTimeout(resolve, REFUSED_PAUSE_MS));
        }
        assert.equal(exited, false, `serve exited during the attack:\n${serve.stderr()}`);
        // Its stderr arrives on its own schedule; the bound only keeps a broken server from hanging the test.
        const failed = /cannot accept connections on 127\.0\.0\.1:\d+ \(.*Too many open files/;
        await until(() => failed.test(serve.stderr()), "EMFILE in serve's log", 10_000);
        const again = /listening again on 127\.0\.0\.1:\d+/;
        await until(() => again.test(serve.stderr()), "serve listening again", 10_000);
        assert.ok(held.length >= ATTACK_CONNECTIONS, `only ${held.length} connections were opened`);
      } finally {
        for (const conn of held) conn.close();
      }
      const answer = await healthzAnswer(port, HEALTHZ_TRIES);
      assert.equal(
        answer,
        "200",
        `no 200 from /healthz in ${HEALTHZ_TRIES} tries after the connections closed`,
      );
      assert.equal(exited, false, "serve exited after the attack");
    } catch (error) {
      throw new Error(`${(error as Error).message}\nserve's stderr:\n${serve.stderr()}`, { cause: error });
    } finally {
      const code = await serve.stop();
      assert.equal(code, 0, serve.stderr());
      assert.match(serve.stderr(), /stopped/);
    }
  },
});

/**
 * `Deno.serve`, but the first listener's accept loop fails on `fail()` as Deno's does at EMFILE (the port
 * closes, then `finished` rejects), and the `refuse` listen calls after it throw EMFILE; `calls` has each port.
 */
function failingListen(refuse = 0) {
  const calls: number[] = [];
  let failNext!: (error: Error) => void;
  const listen: Listen = (options, handler) => {
    calls.push(options.port ?? -1);
    if (calls.length > 1 && refuse-- > 0) throw new Error("Too many open files (os error 24)");
    const server = Deno.serve(options, handler);
    if (calls.length > 1) return server;
    let reject!: (error: Error) => void;
    const finished = new Promise<void>((_, r) => (reject = r));
    failNext = (error) => void server.shutdown().then(() => reject(error));
    return { ...server, addr: server.addr, finished, shutdown: () => server.shutdown() };
  };
  return { listen, calls, fail: (error: Error) => failNext(error) };
}

Deno.test("serveHttp() listens again on the same port when its accept loop fails, retrying while listening fails", async () => {
  using h = httpHarness();
  const { shutdownSignal: _signal, isShuttingDown: _stopping, ...deps } = h.deps;
  const stop = new AbortController();
  const listener = failingListen(2);
  const server = serveHttp(deps, {
    hostname: "127.0.0.1",
    port: 0,
    stop: stop.signal,
    graceSeconds: 5,
    onListen: () => {},
    relistenDelayMs: 1,
    listen: listener.listen,
  });
  try {
    const before = await fetch(`http://127.0.0.1:${server.port}/healthz`);
    assert.equal(before.status, 200);
    await before.body?.cancel();
    listener.fail(new Error("Too many open files (os error 24)"));
    await until(
      () => h.logs.some((line) => line.startsWith("listening again")),
      "the server to listen again",
    );
    const after = await fetch(`http://127.0.0.1:${server.port}/healthz`);
    assert.equal(after.status, 200);
    await after.body?.cancel();
    assert.deepEqual(listener.calls, [0, server.port, server.port, server.port]);
    const address = `127.0.0.1:${server.port}`;
    assert.deepEqual(h.logs.filter((line) => !line.startsWith("GET ")), [
      `cannot accept connections on ${address} (Too many open files (os error 24)): closing its idle ones, listening again`,
      `cannot listen again on ${address} yet (Too many open files (os error 24)): retrying`,
      `listening again on ${address} (attempt 3)`,
    ]);
  } finally {
    stop.abort();
    await server.finished;
  }
});

Deno.test("serveHttp() refuses a negative relistenDelayMs with a RangeError naming the value", () => {
  using h = httpHarness();
  const { shutdownSignal: _signal, isShuttingDown: _stopping, ...deps } = h.deps;
  assert.throws(
    () =>
      serveHttp(deps, {
        hostname: "127.0.0.1",
        port: 0,
        stop: new AbortController().signal,
        graceSeconds: 5,
        relistenDelayMs: -1,
      }),
    { name: "RangeError", message: "Cannot serve: relistenDelayMs must be a number >= 0, got -1" },
  );
});
