/**
 * The bench's footprint section: memory of the serving process with 1,000 sessions in its database, and
 * start-up of `serve` (to its first served request) and of piped `chat` (to its first answer).
 * @module
 */
import { join } from "node:path";
import { agentEnv, runChatOnce, startServe, timeTaskFlags } from "./_bench_agent.ts";
import { makeTempDir, startProvider } from "./_bench_process.ts";
import { median } from "./_bench_stats.ts";

/** Options of {@linkcode measureMemory}. */
export interface MemoryOptions {
  /** Sessions created (one calculator turn each) before measuring. @default {1000} */
  sessions?: number;
  /** Concurrent clients creating them. @default {16} */
  concurrency?: number;
}

/** What {@linkcode measureMemory} measured, in MiB. */
export interface MemoryResult {
  sessions: number;
  /** The serving process right after its first 200 from /healthz, on an empty database. */
  idleRssMiB: number;
  /** After creating the sessions through it, and after listing them (`GET /v1/sessions`). */
  afterCreateRssMiB: number;
  afterListRssMiB: number;
  peakRssMiB: number;
  /** Sessions `GET /v1/sessions` returned. */
  listed: number;
  /** A fresh `serve` on that database: right after start, and after one turn. */
  restartRssMiB: number;
  restartAfterTurnRssMiB: number;
  dbBytes: number;
  errors: number;
  exitCodes: number[];
}

async function createSessions(origin: string, count: number, concurrency: number): Promise<number> {
  let next = 0;
  let errors = 0;
  const worker = async () => {
    while (next < count) {
      const i = next++;
      const response = await fetch(`${origin}/v1/sessions/mem-${i}/messages`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ message: `what is ${i}+1?` }),
      });
      await response.text();
      if (response.status !== 200) errors++;
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return errors;
}

/** Memory of the serving process with `sessions` sessions in its database (0-latency provider). */
export async function measureMemory(options: MemoryOptions = {}): Promise<MemoryResult> {
  const { sessions = 1000, concurrency = 16 } = options;
  await using cleanup = new AsyncDisposableStack();
  const provider = await startProvider();
  cleanup.defer(() => provider.close());
  const temp = await makeTempDir("mra-bench-memory-");
  cleanup.defer(() => temp.remove());
  const dir = temp.path;
  const server = await startServe(dir, provider.url);
  cleanup.defer(() => server.stop().then(() => {}));
  const idle = await server.memory();
  const errors = await createSessions(server.origin, sessions, concurrency);
  const afterCreate = await server.memory();
  const listResponse = await fetch(`${server.origin}/v1/sessions`);
  const listed = ((await listResponse.json()).sessions ?? []).length as number;
  const afterList = await server.memory();
  const exitCodes = [await server.stop()];

  const again = await startServe(dir, provider.url);
  cleanup.defer(() => again.stop().then(() => {}));
  const restart = await again.memory();
  const extra = await createSessions(again.origin, 1, 1);
  const restartAfterTurn = await again.memory();
  exitCodes.push(await again.stop());
  const dbPath = agentEnv(dir, provider.url).AGENT_DB_PATH;
  const size = (path: string) => {
    try {
      return Deno.statSync(path).size;
    } catch {
      return 0;
    }
  };
  return {
    sessions,
    idleRssMiB: idle.rssMiB,
    afterCreateRssMiB: afterCreate.rssMiB,
    afterListRssMiB: afterList.rssMiB,
    peakRssMiB: afterList.peakMiB,
    listed,
    restartRssMiB: restart.rssMiB,
    restartAfterTurnRssMiB: restartAfterTurn.rssMiB,
    dbBytes: size(dbPath) + size(`${dbPath}-wal`),
    errors: errors + extra,
    exitCodes,
  };
}

/** Options of {@linkcode measureStartup}. */
export interface StartupOptions {
  /** Measured starts of each command, after one unmeasured. @default {5} */
  repeats?: number;
}

/** What {@linkcode measureStartup} measured, in milliseconds. */
export interface StartupResult {
  repeats: number;
  /** The unmeasured first start of each (its module cache may have been cold). */
  serveFirstMs: number;
  chatFirstMs: number;
  /** spawn → first 200 from /healthz */
  serveMs: number[];
  serveMedianMs: number;
  /** spawn → first answer line of a piped one-line `chat`, against a 0-latency provider */
  chatMs: number[];
  chatMedianMs: number;
  /** What `deno task` adds before either: the `scripts/task_flags.ts` subprocess, spawn → exit. */
  taskFlagsMedianMs: number;
  /** Every chat answered with the calculator's result and exited 0. */
  chatOk: boolean;
}

/** Start-up of `serve` (to its first served request) and of piped `chat` (to its first answer). */
export async function measureStartup(options: StartupOptions = {}): Promise<StartupResult> {
  const { repeats = 5 } = options;
  await using cleanup = new AsyncDisposableStack();
  const provider = await startProvider();
  cleanup.defer(() => provider.close());
  const temp = await makeTempDir("mra-bench-startup-");
  cleanup.defer(() => temp.remove());
  const dir = temp.path;
  const serveMs: number[] = [];
  const chatMs: number[] = [];
  const flagsMs: number[] = [];
  let chatOk = true;
  for (let r = 0; r <= repeats; r++) {
    const server = await startServe(join(dir, `serve-${r}`), provider.url);
    const code = await server.stop();
    if (code !== 0) throw new Error(`serve exited ${code} after SIGTERM:\n${server.process.stderrTail}`);
    serveMs.push(server.startupMs);
    const chat = await runChatOnce(join(dir, `chat-${r}`), provider.url, "what is 12*(3+4)?", "startup");
    chatOk &&= chat.code === 0 && chat.answer.includes("84");
    chatMs.push(chat.firstAnswerMs);
    if (r > 0) flagsMs.push(await timeTaskFlags("serve", agentEnv(dir, provider.url)));
  }
  return {
    repeats,
    serveFirstMs: serveMs[0],
    chatFirstMs: chatMs[0],
    serveMs: serveMs.slice(1),
    serveMedianMs: median(serveMs.slice(1)),
    chatMs: chatMs.slice(1),
    chatMedianMs: median(chatMs.slice(1)),
    taskFlagsMedianMs: median(flagsMs),
    chatOk,
  };
}
