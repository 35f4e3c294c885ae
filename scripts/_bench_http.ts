/**
 * The bench's HTTP section: `serve` as a subprocess under 1, 16 and 64 concurrent clients on distinct
 * sessions, each interleaved with its floor (the same concurrency of plain fetches straight to the
 * provider), then 16 clients on one session, where the per-session queue answers some with 429.
 * @module
 */
import { processCpuMs, startServe } from "./_bench_agent.ts";
import { type FloorLoadResult, type LoadResult, runFloorLoad, runLoad } from "./_bench_load.ts";
import { type BenchProvider, makeTempDir, startProvider } from "./_bench_process.ts";
import { openBenchRuntime } from "./_bench_runtime.ts";
import { turnMessage } from "./_bench_turns.ts";

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
  /** Retries of one turn after 429s in the shared run. @default {100} */
  max429Retries?: number;
  /** More `deno run` flags for `serve`, e.g. `["--cpu-prof", "--cpu-prof-dir=prof"]`. @default {[]} */
  serveFlags?: string[];
}

/** One load run with its ideal and, for distinct sessions, its measured floor. */
export interface HttpRow extends LoadResult {
  /** clients / per-turn model time (2 × latency); one session: 1 / per-turn model time. */
  idealTurnsPerSecond: number;
  /** turnsPerSecond / idealTurnsPerSecond */
  efficiency: number;
  /** The same clients doing plain fetches of a turn's two bodies to the provider; null for one session. */
  floor: FloorLoadResult | null;
  /** turnsPerSecond / floor.turnsPerSecond */
  efficiencyVsFloor: number | null;
  /** Summary calls the provider answered during the run (compaction on a long session). */
  summaryCalls: number;
  /** The ideal counting the summary calls too: turns / (model calls × latency), one session only. */
  idealWithSummaries: number | null;
  /** CPU time per answered turn of each process during the run, in milliseconds (from `/proc`). */
  cpuMsPerTurn: { server: number; provider: number; bench: number };
  /** CPU time of the three processes over wall time × cores: near 1 means the machine was saturated. */
  machineBusy: number;
}

/** What {@linkcode measureHttp} measured. */
export interface HttpResult {
  latencyMs: number;
  turnsPerClient: number;
  startupMs: number;
  rows: HttpRow[];
  /** `serve`'s exit code after SIGTERM (0 expected). */
  exitCode: number;
  /** RSS of the serving process after the load, in MiB. */
  rssAfterLoadMiB: number;
}

async function summaries(provider: BenchProvider): Promise<number> {
  return (await provider.stats()).summary;
}

/** CPU milliseconds used so far by the server, the provider and this process. */
async function cpuSnapshot(pids: { server: number; provider: number }) {
  const [server, provider, bench] = await Promise.all([
    processCpuMs(pids.server),
    processCpuMs(pids.provider),
    processCpuMs(Deno.pid),
  ]);
  return { server, provider, bench };
}

/** Per-turn CPU of each process between two snapshots, and how busy the machine was. */
function cpuUse(
  before: { server: number; provider: number; bench: number },
  after: { server: number; provider: number; bench: number },
  turns: number,
  wallMs: number,
): { cpuMsPerTurn: { server: number; provider: number; bench: number }; machineBusy: number } {
  const server = after.server - before.server;
  const provider = after.provider - before.provider;
  const bench = after.bench - before.bench;
  return {
    cpuMsPerTurn: { server: server / turns, provider: provider / turns, bench: bench / turns },
    machineBusy: (server + provider + bench) / (wallMs * navigator.hardwareConcurrency),
  };
}

/** The two chat bodies the runtime sends for a first calculator turn, recorded in-process. */
async function captureTurnBodies(dir: string, baseUrl: string): Promise<{ url: string; bodies: string[] }> {
  const runtime = openBenchRuntime(dir, baseUrl);
  try {
    await runtime.turn("capture", turnMessage(0));
    return { url: runtime.url, bodies: runtime.takeRequests().map((r) => r.body) };
  } finally {
    runtime.close();
  }
}

/**
 * Starts a provider with `latencyMs` and `serve` as a subprocess, runs each client count on distinct
 * sessions followed by its floor, then `sharedClients` clients on one session (429s retried after
 * `Retry-After`), and stops the server with SIGTERM.
 */
export async function measureHttp(options: HttpOptions = {}): Promise<HttpResult> {
  const { clients = [1, 16, 64], turnsPerClient = 20, sharedClients = 16, latencyMs = 50 } = options;
  const { max429Retries = 100, serveFlags = [] } = options;
  const perTurnSeconds = (2 * latencyMs) / 1000;
  await using cleanup = new AsyncDisposableStack();
  const provider = await startProvider({ latencyMs });
  cleanup.defer(() => provider.close());
  const temp = await makeTempDir("mra-bench-http-");
  cleanup.defer(() => temp.remove());
  const floor = await captureTurnBodies(temp.path, provider.url);
  const server = await startServe(temp.path, provider.url, { denoFlags: serveFlags });
  cleanup.defer(() => server.stop().then(() => {}));
  // Unmeasured: the first requests compile the handler and the loop.
  await runLoad(server.origin, { clients: 4, turnsPerClient: 2, sessionPrefix: "warmup" });
  await runFloorLoad(floor.url, floor.bodies, { clients: 4, turnsPerClient: 2 });
  const rows: HttpRow[] = [];
  const pids = { server: server.process.pid, provider: provider.process.pid };
  for (const n of clients) {
    const before = await summaries(provider);
    const cpuBefore = await cpuSnapshot(pids);
    const result = await runLoad(server.origin, { clients: n, turnsPerClient, sessionPrefix: `c${n}` });
    const cpu = cpuUse(cpuBefore, await cpuSnapshot(pids), result.turns, result.wallMs);
    const summaryCalls = (await summaries(provider)) - before;
    const base = await runFloorLoad(floor.url, floor.bodies, { clients: n, turnsPerClient });
    const ideal = n / perTurnSeconds;
    rows.push({
      ...result,
      idealTurnsPerSecond: ideal,
      efficiency: result.turnsPerSecond / ideal,
      floor: base,
      efficiencyVsFloor: result.turnsPerSecond / base.turnsPerSecond,
      summaryCalls,
      idealWithSummaries: null,
      ...cpu,
    });
  }
  if (sharedClients > 0) {
    const before = await summaries(provider);
    const cpuBefore = await cpuSnapshot(pids);
    const result = await runLoad(server.origin, {
      clients: sharedClients,
      turnsPerClient,
      sharedSession: "shared-1",
      max429Retries,
    });
    const cpu = cpuUse(cpuBefore, await cpuSnapshot(pids), result.turns, result.wallMs);
    const summaryCalls = (await summaries(provider)) - before;
    const ideal = 1 / perTurnSeconds;
    const modelSeconds = (result.turns * 2 + summaryCalls) * (latencyMs / 1000);
    rows.push({
      ...result,
      idealTurnsPerSecond: ideal,
      efficiency: result.turnsPerSecond / ideal,
      floor: null,
      efficiencyVsFloor: null,
      summaryCalls,
      idealWithSummaries: modelSeconds > 0 ? result.turns / modelSeconds : null,
      ...cpu,
    });
  }
  const rssAfterLoadMiB = (await server.memory()).rssMiB;
  const { startupMs } = server;
  const exitCode = await server.stop();
  return { latencyMs, turnsPerClient, startupMs, rows, exitCode, rssAfterLoadMiB };
}
