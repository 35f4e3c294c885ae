/**
 * The bench's HTTP load: concurrent clients, each doing sequential turns against a running `serve`, on
 * distinct sessions or all on one. A 429 is counted on its own and, when allowed, retried after its
 * `Retry-After`; any other non-200 (or a network failure) is an error.
 * @module
 */
import { floorTurn } from "./_bench_runtime.ts";
import { type Distribution, distribution } from "./_bench_stats.ts";

/** Options of {@linkcode runLoad}. */
export interface LoadOptions {
  /** Concurrent clients. Required. */
  clients: number;
  /** Sequential turns per client. Required. */
  turnsPerClient: number;
  /** Every client on this one session; unset: each client on its own. @default {undefined} */
  sharedSession?: string;
  /** Prefix of the per-client session ids. @default {"load"} */
  sessionPrefix?: string;
  /** Retries of one turn after 429s (honouring `Retry-After`); 0 makes a 429 final. @default {0} */
  max429Retries?: number;
}

/** What one load run measured. */
export interface LoadResult {
  clients: number;
  sessions: "distinct" | "one";
  /** Turns answered 200. */
  turns: number;
  wallMs: number;
  turnsPerSecond: number;
  /** Latency of each 200 request, in milliseconds. */
  latency: Distribution;
  /** Per turn, from its first attempt to its 200, waits after 429s included. */
  turnLatency: Distribution;
  /** Non-200 answers other than 429, and network failures. */
  errors: number;
  errorStatuses: Record<string, number>;
  /** 429 answers (each retried while retries were left). */
  status429: number;
  /** Turns abandoned after `max429Retries` retries. */
  gaveUp: number;
  /** Turns whose answer did not hold the calculator's result (a 200 with a wrong body). */
  wrongAnswers: number;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Runs the load against `origin` and resolves once every client is done. Never rejects for a response. */
export async function runLoad(origin: string, options: LoadOptions): Promise<LoadResult> {
  const { clients, turnsPerClient, sharedSession, sessionPrefix = "load", max429Retries = 0 } = options;
  const latencies: number[] = [];
  const turnLatencies: number[] = [];
  const errorStatuses: Record<string, number> = {};
  let errors = 0;
  let status429 = 0;
  let gaveUp = 0;
  let wrongAnswers = 0;

  const client = async (k: number) => {
    const session = sharedSession ?? `${sessionPrefix}-${k}`;
    const url = `${origin}/v1/sessions/${session}/messages`;
    for (let t = 0; t < turnsPerClient; t++) {
      const a = k + 1;
      const b = t + 2;
      const body = JSON.stringify({ message: `what is ${a}*(${b}+4)?` });
      const firstAttempt = performance.now();
      for (let attempt = 0;; attempt++) {
        const started = performance.now();
        let status: number;
        let text: string;
        let retryAfter: string | null;
        try {
          const response = await fetch(url, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body,
          });
          status = response.status;
          retryAfter = response.headers.get("retry-after");
          text = await response.text();
        } catch (error) {
          errors++;
          errorStatuses[`network: ${(error as Error).name}`] =
            (errorStatuses[`network: ${(error as Error).name}`] ?? 0) + 1;
          break;
        }
        const ended = performance.now();
        if (status === 200) {
          latencies.push(ended - started);
          turnLatencies.push(ended - firstAttempt);
          if (!text.includes(String(a * (b + 4)))) wrongAnswers++;
          break;
        }
        if (status === 429) {
          status429++;
          if (attempt >= max429Retries) {
            gaveUp++;
            break;
          }
          const seconds = Number(retryAfter);
          await sleep(Number.isFinite(seconds) && seconds > 0 ? seconds * 1000 : 1000);
          continue;
        }
        errors++;
        errorStatuses[String(status)] = (errorStatuses[String(status)] ?? 0) + 1;
        break;
      }
    }
  };

  const started = performance.now();
  await Promise.all(Array.from({ length: clients }, (_, k) => client(k)));
  const wallMs = performance.now() - started;
  return {
    clients,
    sessions: sharedSession === undefined ? "distinct" : "one",
    turns: latencies.length,
    wallMs,
    turnsPerSecond: latencies.length / (wallMs / 1000),
    latency: distribution(latencies),
    turnLatency: distribution(turnLatencies),
    errors,
    errorStatuses,
    status429,
    gaveUp,
    wrongAnswers,
  };
}

/** What one floor load run measured: the same concurrency with no server, straight to the provider. */
export interface FloorLoadResult {
  turns: number;
  wallMs: number;
  turnsPerSecond: number;
  /** Per floor turn (the bodies in order), in milliseconds. */
  latency: Distribution;
}

/**
 * The floor of a load: `clients` concurrent loops, each doing `turnsPerClient` sequential "turns" of plain
 * fetches of `bodies` to the provider's `url` (what a turn costs the machine without the runtime or HTTP
 * server in between). Rejects on a non-200.
 */
export async function runFloorLoad(
  url: string,
  bodies: readonly string[],
  options: { clients: number; turnsPerClient: number },
): Promise<FloorLoadResult> {
  const { clients, turnsPerClient } = options;
  const latencies: number[] = [];
  const client = async () => {
    for (let t = 0; t < turnsPerClient; t++) {
      const started = performance.now();
      await floorTurn(url, bodies);
      latencies.push(performance.now() - started);
    }
  };
  const started = performance.now();
  await Promise.all(Array.from({ length: clients }, client));
  const wallMs = performance.now() - started;
  return {
    turns: latencies.length,
    wallMs,
    turnsPerSecond: latencies.length / (wallMs / 1000),
    latency: distribution(latencies),
  };
}
