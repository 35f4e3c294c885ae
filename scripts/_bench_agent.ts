/**
 * The agent's own commands as subprocesses, started the way `deno task serve` and `deno task chat` start
 * them: `deno run --no-prompt <taskPermissionFlags(env, {task})> src/main.ts <command>`, with a clean
 * environment holding only the runtime's variables (and what `deno` itself needs).
 * @module
 */
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { taskPermissionFlags } from "../src/permissions.ts";
import { baseEnv, freePort, ManagedProcess } from "./_bench_process.ts";

const MAIN = fileURLToPath(new URL("../src/main.ts", import.meta.url));

/** The runtime's variables for a run on files in `dir` against the provider at `baseUrl`. */
export function agentEnv(
  dir: string,
  baseUrl: string,
  extra: Record<string, string> = {},
): Record<string, string> {
  return {
    OPENAI_BASE_URL: baseUrl,
    AGENT_DB_PATH: join(dir, "db", "sessions.db"),
    AGENT_TRACE_PATH: join(dir, "trace", "traces.jsonl"),
    AGENT_STREAM: "0",
    ...extra,
  };
}

/** A running `serve` subprocess. */
export interface ServeProcess {
  /** `http://127.0.0.1:<port>` */
  origin: string;
  process: ManagedProcess;
  /** Spawn to the first 200 from `/healthz`, in milliseconds. */
  startupMs: number;
  /** VmRSS and VmHWM (peak) of the serving process, in MiB, from `/proc/<pid>/status`. */
  memory(): Promise<{ rssMiB: number; peakMiB: number }>;
  /** SIGTERM (then SIGKILL after `graceMs`); resolves with the exit code. Never rejects. */
  stop(graceMs?: number): Promise<number>;
}

/** Options of {@linkcode startServe}. */
export interface StartServeOptions {
  /** More runtime variables (e.g. `AGENT_SHUTDOWN_GRACE_SECONDS`). @default {{}} */
  env?: Record<string, string>;
  /** How long to wait for the first 200 from `/healthz`. @default {30000} */
  timeoutMs?: number;
  /** More `deno run` flags before the script, e.g. `--cpu-prof`. @default {[]} */
  denoFlags?: string[];
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * Reads `/proc/<pid>/<file>` (Linux only). Deno grants reading `/proc` only with `--allow-all`; under
 * narrower flags (the test task's) `cat` reads it, which `--allow-run` allows.
 */
async function readProc(pid: number, file: "status" | "stat"): Promise<string> {
  const path = `/proc/${pid}/${file}`;
  try {
    return await Deno.readTextFile(path);
  } catch (error) {
    if (!(error instanceof Deno.errors.NotCapable)) throw error;
    const { code, stdout } = await new Deno.Command("cat", { args: [path], stderr: "null" }).output();
    if (code !== 0) throw new Error(`Cannot read ${path}: cat exited ${code}`);
    return new TextDecoder().decode(stdout);
  }
}

/** VmRSS and VmHWM (peak) of `pid`, in MiB, from `/proc/<pid>/status`. */
export async function processMemory(pid: number): Promise<{ rssMiB: number; peakMiB: number }> {
  const status = await readProc(pid, "status");
  const kib = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(status)?.[1] ?? NaN);
  return { rssMiB: kib("VmRSS") / 1024, peakMiB: kib("VmHWM") / 1024 };
}

/** Clock ticks per second of `/proc/<pid>/stat` times (USER_HZ, 100 on Linux). */
const TICKS_PER_SECOND = 100;

/** CPU time `pid` has used so far, user plus system, in milliseconds, from `/proc/<pid>/stat`. */
export async function processCpuMs(pid: number): Promise<number> {
  const stat = await readProc(pid, "stat");
  // Fields after the command name, which is in parentheses and may contain spaces.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  const [utime, stime] = [Number(fields[11]), Number(fields[12])];
  return ((utime + stime) * 1000) / TICKS_PER_SECOND;
}

/**
 * Starts `serve` on a free port with its database and trace in `dir`, and resolves once `/healthz` answers
 * 200. On failure the process is stopped and the error carries its stderr.
 */
export async function startServe(
  dir: string,
  baseUrl: string,
  options: StartServeOptions = {},
): Promise<ServeProcess> {
  const { env: extra = {}, timeoutMs = 30_000, denoFlags = [] } = options;
  const port = freePort();
  const env = agentEnv(dir, baseUrl, { AGENT_PORT: String(port), ...extra });
  const flags = taskPermissionFlags(env, { task: "serve" });
  const process = new ManagedProcess(Deno.execPath(), [
    "run",
    "--no-prompt",
    ...denoFlags,
    ...flags,
    MAIN,
    "serve",
  ], {
    env: { ...baseEnv(), ...env },
  });
  const origin = `http://127.0.0.1:${port}`;
  let startupMs: number;
  try {
    startupMs = await waitHealthy(origin, process, timeoutMs);
  } catch (error) {
    await process.stop();
    throw error;
  }
  return {
    origin,
    process,
    startupMs,
    memory: () => processMemory(process.pid),
    stop: async (graceMs = 15_000) => (await process.stop(graceMs)).code,
  };
}

/** Polls `/healthz` every 5 ms; resolves with the time from spawn to its first 200. */
async function waitHealthy(origin: string, process: ManagedProcess, timeoutMs: number): Promise<number> {
  const deadline = performance.now() + timeoutMs;
  let exited = false;
  process.child.status.then(() => exited = true);
  while (performance.now() < deadline) {
    if (exited) throw new Error(`serve exited before it was healthy:\n${process.stderrTail}`);
    try {
      const response = await fetch(`${origin}/healthz`);
      await response.body?.cancel();
      if (response.status === 200) return performance.now() - process.spawnedAt;
    } catch {
      // Not listening yet.
    }
    await sleep(5);
  }
  throw new Error(`serve was not healthy after ${timeoutMs} ms:\n${process.stderrTail}`);
}

/** What one piped `chat` run measured. */
export interface ChatRun {
  /** Spawn to the first answer line on stdout, in milliseconds. */
  firstAnswerMs: number;
  answer: string;
  code: number;
}

/**
 * Runs `chat` with one piped input line, its database and trace in `dir`, and measures the time from spawn
 * to its first stdout line (there is no prompt when stdin is piped: this is the time to the first answer).
 */
export async function runChatOnce(
  dir: string,
  baseUrl: string,
  message: string,
  session: string,
): Promise<ChatRun> {
  const env = agentEnv(dir, baseUrl);
  const flags = taskPermissionFlags(env, { task: "chat" });
  const process = new ManagedProcess(
    Deno.execPath(),
    ["run", "--no-prompt", ...flags, MAIN, "chat", "--session", session],
    { env: { ...baseEnv(), ...env } },
  );
  try {
    await process.write(`${message}\n`);
    await process.closeStdin();
    const line = await process.line(0, 30_000);
    const status = await process.exited();
    return { firstAnswerMs: line.at - process.spawnedAt, answer: line.text, code: status.code };
  } finally {
    await process.stop();
  }
}

/**
 * Times what `deno task` runs before the command itself: the `scripts/task_flags.ts` subprocess that
 * derives the flags (spawn to exit, in milliseconds).
 */
export async function timeTaskFlags(task: "chat" | "serve", env: Record<string, string>): Promise<number> {
  const process = new ManagedProcess(Deno.execPath(), [
    "run",
    "--quiet",
    "--no-prompt",
    "--allow-env",
    "--allow-read=.",
    "scripts/task_flags.ts",
    task,
  ], { env: { ...baseEnv(), ...env } });
  try {
    const status = await process.exited();
    if (status.code !== 0) throw new Error(`task_flags.ts exited ${status.code}:\n${process.stderrTail}`);
    return performance.now() - process.spawnedAt;
  } finally {
    await process.stop();
  }
}
