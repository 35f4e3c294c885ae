/**
 * The bench's measure of the runtime's own work per turn: the full stack (SQLite file in WAL mode, trace
 * file, context building, compaction when due, the fetch client parsing real completion bodies) with the
 * model answered inside the process by the bench provider's own rules, so no socket and no other process
 * is involved. The time the stub spends answering is subtracted. What is left is the runtime's work on a
 * warm CPU, with far less noise than a loopback round trip.
 * @module
 */
import { answer, completion } from "./_bench_provider.ts";
import { makeTempDir } from "./_bench_process.ts";
import { openBenchRuntime } from "./_bench_runtime.ts";
import { type Distribution, distribution } from "./_bench_stats.ts";
import { turnMessage } from "./_bench_turns.ts";

/** Options of {@linkcode measureRuntimeWork}. */
export interface WorkOptions {
  /** Rounds, each on a fresh session. @default {10} */
  rounds?: number;
  /** Turns per round. @default {100} */
  turns?: number;
}

/** What {@linkcode measureRuntimeWork} measured, in microseconds per turn. */
export interface WorkResult {
  rounds: number;
  turnsPerRound: number;
  /** Every measured turn. */
  all: Distribution;
  /** Turns 1..AGENT_MAX_RAW_TURNS of each round: no compaction due. */
  beforeCompaction: Distribution;
  /** Later turns: each compacts one turn (a summary call and its transaction). */
  compacting: Distribution;
  /** Median time the stub model took per turn, already subtracted. */
  stubMedianUs: number;
}

/**
 * Runs `rounds` × `turns` calculator turns against an in-process model after one unmeasured round, and
 * returns the runtime's time per turn with the model's own time taken out.
 */
export async function measureRuntimeWork(options: WorkOptions = {}): Promise<WorkResult> {
  const { rounds = 10, turns = 100 } = options;
  if (!Number.isInteger(rounds) || rounds < 1) throw new RangeError(`rounds must be >= 1, got ${rounds}`);
  if (!Number.isInteger(turns) || turns < 1) throw new RangeError(`turns must be >= 1, got ${turns}`);
  let stubMs = 0;
  const model: typeof fetch = (_input, init) => {
    const started = performance.now();
    const text = typeof init?.body === "string" ? init.body : "{}";
    const body = JSON.parse(text) as Record<string, unknown>;
    const reply = completion(String(body.model), answer(body).message, text.length);
    const response = new Response(JSON.stringify(reply), { headers: { "Content-Type": "application/json" } });
    stubMs += performance.now() - started;
    return Promise.resolve(response);
  };
  await using cleanup = new AsyncDisposableStack();
  const temp = await makeTempDir("mra-bench-work-");
  cleanup.defer(() => temp.remove());
  // The base URL is never dialled: every request goes to the stub.
  const runtime = openBenchRuntime(temp.path, "http://127.0.0.1:9/v1", { fetch: model });
  cleanup.defer(() => runtime.close());
  const maxRawTurns = runtime.config.maxRawTurns;
  const all: number[] = [];
  const before: number[] = [];
  const compacting: number[] = [];
  const stub: number[] = [];
  for (let r = -1; r < rounds; r++) {
    for (let i = 0; i < turns; i++) {
      const stubBefore = stubMs;
      const started = performance.now();
      const result = await runtime.turn(`work-${r}`, turnMessage(i));
      const elapsed = performance.now() - started;
      if (result.outcome !== "answered") throw new Error(`Round ${r + 1} turn ${i + 1}: ${result.outcome}`);
      runtime.takeRequests();
      if (r < 0) continue;
      const us = (elapsed - (stubMs - stubBefore)) * 1000;
      all.push(us);
      (i < maxRawTurns ? before : compacting).push(us);
      stub.push((stubMs - stubBefore) * 1000);
    }
  }
  return {
    rounds,
    turnsPerRound: turns,
    all: distribution(all),
    beforeCompaction: distribution(before),
    compacting: distribution(compacting),
    stubMedianUs: distribution(stub).median,
  };
}
