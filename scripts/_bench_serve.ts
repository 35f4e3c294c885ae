/**
 * The bench's subprocess sections: HTTP load on `serve`, its memory, start-up of `serve` and `chat`; each run
 * as `deno task` runs it (the task's flags), in a clean environment holding only the runtime's variables.
 * @module
 */
import { join } from "node:path";
import { taskPermissionFlags } from "../src/permissions.ts";
import {
  baseEnv,
  distribution,
  freePort,
  makeTempDir,
  ManagedProcess,
  median,
  processMemory,
  resetPeakMemory,
  startProvider,
} from "./_bench_process.ts";
import { delay } from "./_fake_provider.ts";
import { floorTurn, openBenchRuntime, turnMessage } from "./_bench_turns.ts";

/** Each task's command line, whether deno.json writes it as a string or as `{description, command}`. */
const TASKS: Record<string, string> = Object.fromEntries(
  Object.entries(
    JSON.parse(Deno.readTextFileSync(new URL("../deno.json", import.meta.url))).tasks as Record<
      string,
      string | { command: string }
    >,
  ).map(([name, task]) => [name, typeof task === "string" ? task : task.command]),
);

function spawnAgent(command: "chat" | "serve", dir: string, baseUrl: string, extra = {}): ManagedProcess {
  const env = {
    OPENAI_BASE_URL: baseUrl,
    AGENT_DB_PATH: join(dir, "db", "sessions.db"),
    AGENT_TRACE_PATH: join(dir, "trace", "traces.jsonl"),
    AGENT_STREAM: "0",
    ...extra,
  };
  const flags = taskPermissionFlags(env, { task: command });
  const args = command === "chat" ? ["--session", "startup"] : [];
  // The task's V8 flags too (serve sizes its young generation), as `deno task` passes them.
  const v8 = TASKS[command].split(" ").filter((word) => word.startsWith("--v8-flags="));
  const argv = ["run", "--no-prompt", ...v8, ...flags, "src/main.ts", command, ...args];
  return new ManagedProcess(argv, { ...baseEnv(), ...env });
}

/** Starts `serve` on a free port (`extra`: more variables) and waits for its first 200 from `/healthz`. */
async function startServe(dir: string, baseUrl: string, extra: Record<string, string> = {}) {
  const port = freePort();
  const process = spawnAgent("serve", dir, baseUrl, { ...extra, AGENT_PORT: String(port) });
  const origin = `http://127.0.0.1:${port}`;
  for (const deadline = performance.now() + 30_000; performance.now() < deadline; await delay(5)) {
    if (!await fetch(`${origin}/healthz`).then((r) => (r.body?.cancel(), r.ok), () => false)) continue;
    const startupMs = performance.now() - process.spawnedAt;
    return { origin, process, startupMs, stop: async () => (await process.stop(15_000)).code };
  }
  await process.stop();
  throw new Error(`serve was not healthy after 30 s:\n${process.stderr}`);
}

/**
 * `clients` concurrent clients of sequential turns, client `k` on `origins[k % n]` (replicas); on one `shared`
 * session 429s wait for `Retry-After`.
 */
async function runLoad(
  origins: readonly string[],
  clients: number,
  turnsPerClient: number,
  shared?: string,
  plan: LoadPlan = {},
) {
  const { deadline = Infinity, sharedAmong = clients } = plan;
  const [latencies, turnLatencies]: number[][] = [[], []];
  let [errors, status429, gaveUp, wrongAnswers] = [0, 0, 0, 0];
  /** Each failed answer's status (`fetch` for a request that got none), and how many. */
  const failures: Record<string, number> = {};
  const client = async (k: number) => {
    const origin = origins[k % origins.length];
    const session = shared !== undefined && k < sharedAmong ? shared : `load-${clients}-${k}`;
    const url = `${origin}/v1/sessions/${session}/messages`;
    for (let t = 0; t < turnsPerClient && performance.now() < deadline; t++) {
      const body = JSON.stringify({ message: `what is ${k + 1}*(${t + 2}+4)?` });
      const headers = { "content-type": "application/json" };
      const firstAttempt = performance.now();
      for (let attempt = 0; attempt <= 100; attempt++) {
        const started = performance.now();
        const response = await fetch(url, { method: "POST", headers, body }).catch(() => null);
        const text = await response?.text();
        if (response?.status === 429) status429++;
        if (response?.status === 429 && session === shared) {
          if (attempt < 100 && performance.now() < deadline) {
            await delay(Number(response.headers.get("retry-after") || 1) * 1000);
            continue;
          }
          gaveUp++;
        } else if (response?.status !== 200) {
          errors++;
          const status = response === null ? "fetch" : String(response!.status);
          failures[status] = (failures[status] ?? 0) + 1;
        } else {
          latencies.push(performance.now() - started);
          turnLatencies.push(performance.now() - firstAttempt);
          if (!text!.includes(String((k + 1) * (t + 6)))) wrongAnswers++;
        }
        break;
      }
    }
  };
  const started = performance.now();
  await Promise.all(Array.from({ length: clients }, (_, k) => client(k)));
  const turnsPerSecond = latencies.length / ((performance.now() - started) / 1000);
  return {
    clients,
    sessions: shared === undefined ? "distinct" : "one",
    turns: latencies.length,
    turnsPerSecond,
    latency: distribution(latencies),
    /** From a turn's first attempt to its 200, waits after 429s included. */
    turnLatency: distribution(turnLatencies),
    errors,
    failures,
    status429,
    /** Turns on the shared session still refused with 429 after 100 waits, or at the deadline: not errors. */
    gaveUp,
    wrongAnswers,
  };
}

/** How {@linkcode runLoad} ends and shares: by a `performance.now()` deadline; the first `sharedAmong` clients on the shared session. */
interface LoadPlan {
  /** @default {Infinity} (after `turnsPerClient` turns) */
  deadline?: number;
  /** @default {clients} (all of them) */
  sharedAmong?: number;
}

/** The floor of a load: the same clients sending a turn's two requests straight to the provider. */
async function runFloorLoad(url: string, bodies: string[], clients: number, turnsPerClient: number) {
  const started = performance.now();
  await Promise.all(Array.from({ length: clients }, async () => {
    for (let t = 0; t < turnsPerClient; t++) await floorTurn(url, bodies);
  }));
  return (clients * turnsPerClient) / ((performance.now() - started) / 1000);
}

/** Options of {@linkcode measureHttp}. */
export interface HttpOptions {
  /** Client counts, each client on its own session. @default {[1, 16, 64]} */
  clients?: number[];
  /** Sequential turns per client. @default {20} */
  turnsPerClient?: number;
  /** Clients on one shared session afterwards; 0 skips it. @default {16} */
  sharedClients?: number;
  /** The provider's fixed latency per response. @default {50} */
  latencyMs?: number;
  /** How long serve idles after the last load before `rssIdleMiB` is read; 0 skips it. @default {30_000} */
  idleMs?: number;
  /** PostgreSQL for the sessions (AGENT_DATABASE_URL); empty: SQLite in the run's temp folder. @default {""} */
  databaseUrl?: string;
  /** `serve` processes on the one database, the clients spread over them; more than 1 needs PostgreSQL. @default {1} */
  replicas?: number;
}

/** `serve` under load against a provider with `latencyMs`, each run beside its ideal and floor. */
export async function measureHttp(options: HttpOptions = {}) {
  const { clients = [1, 16, 64], turnsPerClient = 20, sharedClients = 16, latencyMs = 50 } = options;
  const { idleMs = 30_000, databaseUrl = "", replicas = 1 } = options;
  if (replicas > 1 && databaseUrl === "") {
    throw new RangeError("Cannot run replicas on SQLite: set databaseUrl");
  }
  await using cleanup = new AsyncDisposableStack();
  const provider = await startProvider(latencyMs);
  cleanup.defer(() => provider.close());
  const temp = await makeTempDir("mra-bench-http-");
  cleanup.defer(() => temp.remove());
  const capture = openBenchRuntime(temp.path, provider.url);
  await capture.turn("capture", turnMessage(0));
  const bodies = capture.takeRequests().map((r) => r.body);
  capture.close();
  const extra: Record<string, string> = databaseUrl === "" ? {} : { AGENT_DATABASE_URL: databaseUrl };
  const servers = [];
  for (let i = 0; i < replicas; i++) {
    const server = await startServe(temp.path, provider.url, extra);
    cleanup.defer(async () => void await server.stop());
    servers.push(server);
  }
  const [server] = servers;
  const origins = servers.map((s) => s.origin);
  // Unmeasured: the first requests compile the handler and the loop.
  await runLoad(origins, 4 * replicas, 2);
  await runFloorLoad(capture.url, bodies, 4, 2);
  const runs = [...clients.map((n) => [n, undefined] as const)];
  if (sharedClients > 0) runs.push([sharedClients, "shared-1"] as never);
  const rows = [];
  const { pid } = server.process;
  for (const [n, shared] of runs) {
    const summariesBefore = await provider.summaries();
    await resetPeakMemory(pid);
    const result = await runLoad(origins, n, turnsPerClient, shared);
    const { peakMiB: rssPeakMiB } = await processMemory(pid);
    const floor = shared === undefined ? await runFloorLoad(capture.url, bodies, n, turnsPerClient) : null;
    // What serve keeps once the load is over: read 1 s after the floor load, which ran without it.
    await delay(1000);
    const { rssMiB: rssAfterMiB } = await processMemory(pid);
    const ideal = (shared === undefined ? n : 1) / ((2 * latencyMs) / 1000);
    rows.push({
      ...result,
      idealTurnsPerSecond: ideal,
      efficiency: result.turnsPerSecond / ideal,
      floorTurnsPerSecond: floor,
      efficiencyVsFloor: floor === null ? null : result.turnsPerSecond / floor,
      summaryCalls: (await provider.summaries()) - summariesBefore,
      rssPeakMiB,
      rssAfterMiB,
    });
  }
  // V8 gives back most of what a load took after about 25 s without one.
  const rssIdleMiB = idleMs > 0 ? (await delay(idleMs), await processMemory(pid)).rssMiB : null;
  let exitCode = 0;
  for (const each of servers) exitCode = Math.max(exitCode, await each.stop());
  return { latencyMs, turnsPerClient, startupMs: server.startupMs, rows, rssIdleMiB, exitCode };
}

/** Memory of `serve` (VmRSS, MiB) idle, with `sessions` sessions created through it, and listed. */
export async function measureMemory(options: { sessions?: number; concurrency?: number } = {}) {
  const { sessions = 1000, concurrency = 16 } = options;
  await using cleanup = new AsyncDisposableStack();
  const provider = await startProvider();
  cleanup.defer(() => provider.close());
  const temp = await makeTempDir("mra-bench-memory-");
  cleanup.defer(() => temp.remove());
  const server = await startServe(temp.path, provider.url);
  cleanup.defer(async () => void await server.stop());
  const idle = await processMemory(server.process.pid);
  let [next, errors] = [0, 0];
  await Promise.all(Array.from({ length: concurrency }, async () => {
    for (let i = next++; i < sessions; i = next++) {
      const body = JSON.stringify({ message: `what is ${i}+1?` });
      const init = { method: "POST", headers: { "content-type": "application/json" }, body };
      const response = await fetch(`${server.origin}/v1/sessions/mem-${i}/messages`, init);
      if ((await response.text(), response.status) !== 200) errors++;
    }
  }));
  const afterCreate = await processMemory(server.process.pid);
  const listed = (await (await fetch(`${server.origin}/v1/sessions`)).json()).sessions.length;
  const afterList = await processMemory(server.process.pid);
  return {
    sessions,
    idleRssMiB: idle.rssMiB,
    afterCreateRssMiB: afterCreate.rssMiB,
    afterListRssMiB: afterList.rssMiB,
    peakRssMiB: afterList.peakMiB,
    listed,
    errors,
    exitCode: await server.stop(),
  };
}

/** Start-up, medians of `repeats` after one unmeasured: `serve` to its first 200, `chat` to its answer. */
export async function measureStartup(options: { repeats?: number } = {}) {
  const { repeats = 5 } = options;
  await using cleanup = new AsyncDisposableStack();
  const provider = await startProvider();
  cleanup.defer(() => provider.close());
  const temp = await makeTempDir("mra-bench-startup-");
  cleanup.defer(() => temp.remove());
  const [serveMs, chatMs]: number[][] = [[], []];
  let chatOk = true;
  for (let r = 0; r <= repeats; r++) {
    const server = await startServe(join(temp.path, `serve-${r}`), provider.url);
    const code = await server.stop();
    if (code !== 0) throw new Error(`serve exited ${code} after SIGTERM:\n${server.process.stderr}`);
    serveMs.push(server.startupMs);
    const chat = spawnAgent("chat", join(temp.path, `chat-${r}`), provider.url);
    await chat.input("what is 12*(3+4)?\n");
    const line = await chat.line(0, 30_000);
    chatOk &&= (await chat.exited()).code === 0 && line.text.includes("84");
    chatMs.push(line.at - chat.spawnedAt);
  }
  return { repeats, serveMedianMs: median(serveMs.slice(1)), chatMedianMs: median(chatMs.slice(1)), chatOk };
}

export type HttpResult = Awaited<ReturnType<typeof measureHttp>>;
export type MemoryResult = Awaited<ReturnType<typeof measureMemory>>;
export type StartupResult = Awaited<ReturnType<typeof measureStartup>>;

/** Options of {@linkcode measureSustained}. */
export interface SustainedOptions {
  /** How long the load runs. @default {300_000} (5 minutes) */
  durationMs?: number;
  /** Concurrent clients of sequential turns. @default {64} */
  clients?: number;
  /** Of them, on one shared session (the rest on one session each). @default {20} */
  sharedClients?: number;
  /** The provider's fixed latency per response. @default {50} */
  latencyMs?: number;
  /** How long serve idles after the load before the last reading. @default {30_000} */
  idleMs?: number;
  /** Readings of VmRSS during the load, evenly spread. @default {10} */
  samples?: number;
}

/**
 * `serve` under a sustained load: `clients` (`sharedClients` of them on one session, whose 429s wait for
 * `Retry-After`) doing turns for `durationMs`; VmRSS read `samples` times on the way, its peak (VmHWM) over
 * the whole load, and VmRSS `idleMs` after it ended, so a figure that rises with run length shows.
 */
export async function measureSustained(options: SustainedOptions = {}) {
  const { durationMs = 300_000, clients = 64, sharedClients = 20, latencyMs = 50 } = options;
  const { idleMs = 30_000, samples = 10 } = options;
  await using cleanup = new AsyncDisposableStack();
  const provider = await startProvider(latencyMs);
  cleanup.defer(() => provider.close());
  const temp = await makeTempDir("mra-bench-sustained-");
  cleanup.defer(() => temp.remove());
  const server = await startServe(temp.path, provider.url);
  cleanup.defer(async () => void await server.stop());
  const { pid } = server.process;
  await runLoad([server.origin], 4, 2); // Unmeasured: compiles the handler and the loop.
  await resetPeakMemory(pid);
  const started = performance.now();
  const deadline = started + durationMs;
  const load = runLoad([server.origin], clients, Number.MAX_SAFE_INTEGER, "sustained-shared", {
    deadline,
    sharedAmong: sharedClients,
  });
  /** VmRSS in MiB by when it was read, `"30s"`: the report prints one line each. */
  const rssMiB: Record<string, number> = {};
  for (let i = 1; i <= samples; i++) {
    await delay(Math.max(0, started + (durationMs * i) / samples - performance.now()));
    const atS = Number(((performance.now() - started) / 1000).toFixed(1));
    rssMiB[`${atS}s`] = (await processMemory(pid)).rssMiB;
  }
  const result = await load;
  const { peakMiB, rssMiB: endMiB } = await processMemory(pid);
  await delay(idleMs);
  const idleRssMiB = (await processMemory(pid)).rssMiB;
  const exitCode = await server.stop();
  const { turns, turnsPerSecond, errors, failures, status429, gaveUp, wrongAnswers, turnLatency } = result;
  return {
    durationS: durationMs / 1000,
    clients,
    sharedClients,
    latencyMs,
    turns,
    turnsPerSecond,
    turnLatency,
    errors,
    failures,
    status429,
    gaveUp,
    wrongAnswers,
    rssMiB,
    peakRssMiB: peakMiB,
    endRssMiB: endMiB,
    idleS: idleMs / 1000,
    idleRssMiB,
    exitCode,
  };
}
