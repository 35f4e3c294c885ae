/**
 * The bench's subprocesses (the fake provider among them), temporary folders, `/proc` readings and medians,
 * all tracked so that {@linkcode cleanUpAll} can undo a run.
 * @module
 */
import { fileURLToPath } from "node:url";
import { delay } from "./_fake_provider.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const PROVIDER = fileURLToPath(new URL("./_fake_provider.ts", import.meta.url));
const live = new Set<ManagedProcess>();
const dirs = new Set<string>();

/** A `deno` child in the repository root, its stdout lines kept with the time each arrived. */
export class ManagedProcess {
  readonly spawnedAt = performance.now();
  readonly child: Deno.ChildProcess;
  readonly lines: { text: string; at: number }[] = [];
  /** The end of its stderr, once it has exited. */
  stderr = "";
  #done: Promise<Deno.CommandStatus>;
  #stdinOpen = true;

  /** Spawns `deno args`; with `env`, the parent's environment is not inherited. */
  constructor(args: string[], env?: Record<string, string>) {
    const options = { args, cwd: ROOT, env, clearEnv: env !== undefined } as const;
    const pipes = { stdin: "piped", stdout: "piped", stderr: "piped" } as const;
    const child = this.child = new Deno.Command(Deno.execPath(), { ...options, ...pipes }).spawn();
    live.add(this);
    const stdout = (async () => {
      let rest = "";
      for await (const chunk of child.stdout.pipeThrough(new TextDecoderStream())) {
        const parts = (rest + chunk).split("\n");
        rest = parts.pop()!;
        for (const text of parts) this.lines.push({ text, at: performance.now() });
      }
    })().catch(() => {});
    const stderr = new Response(child.stderr).text().then((t) => this.stderr = t.slice(-3000), () => {});
    this.#done = Promise.all([child.status, stdout, stderr]).then(([status]) => status);
  }

  get pid(): number {
    return this.child.pid;
  }

  /** Stdout line `index` once it arrives; rejects if the child exits first or `timeoutMs` pass. */
  async line(index: number, timeoutMs: number): Promise<{ text: string; at: number }> {
    let exited = false;
    this.#done.then(() => exited = true);
    for (const deadline = performance.now() + timeoutMs; this.lines.length <= index; await delay(2)) {
      if (exited || performance.now() > deadline) {
        await this.stop();
        throw new Error(`No stdout line ${index + 1} (${exited ? "exited" : "timed out"}):\n${this.stderr}`);
      }
    }
    return this.lines[index];
  }

  /** Writes `text` to the child's stdin and closes it. */
  async input(text: string): Promise<void> {
    this.#stdinOpen = false;
    const writer = this.child.stdin.getWriter();
    await writer.write(new TextEncoder().encode(text)).catch(() => {});
    await writer.close().catch(() => {});
  }

  /** Resolves with the status once the child has exited by itself and its output is read. */
  async exited(): Promise<Deno.CommandStatus> {
    if (this.#stdinOpen) await this.input("");
    const status = await this.#done;
    live.delete(this);
    return status;
  }

  /** SIGTERM, then SIGKILL after `graceMs`; resolves with the status. Never rejects. */
  async stop(graceMs = 5000): Promise<Deno.CommandStatus> {
    const signal = (name: Deno.Signal) => void Promise.try(() => this.child.kill(name)).catch(() => {});
    signal("SIGTERM");
    const timer = setTimeout(() => signal("SIGKILL"), graceMs);
    const status = await this.exited();
    clearTimeout(timer);
    return status;
  }
}

/** A temporary folder, removed by `remove` or by {@linkcode cleanUpAll}. */
export async function makeTempDir(prefix: string): Promise<{ path: string; remove(): Promise<void> }> {
  const path = await Deno.makeTempDir({ prefix });
  dirs.add(path);
  const remove = async () => {
    dirs.delete(path);
    await Deno.remove(path, { recursive: true }).catch(() => {});
  };
  return { path, remove };
}

/** Stops every process still running and removes every folder still there (an interrupted bench). */
export async function cleanUpAll(): Promise<void> {
  await Promise.all([...live].map((p) => p.stop(3000)));
  for (const path of [...dirs]) await Deno.remove(path, { recursive: true }).catch(() => {});
  dirs.clear();
}

/** Starts the fake provider as its own process (its CPU is not the runtime's) and waits until it listens. */
export async function startProvider(latencyMs = 0) {
  const process = new ManagedProcess(["run", "--quiet", "--allow-net=127.0.0.1", PROVIDER, `${latencyMs}`]);
  const origin = `http://127.0.0.1:${Number((await process.line(0, 20_000)).text)}`;
  return {
    /** The base URL for `OPENAI_BASE_URL`. */
    url: `${origin}/v1`,
    process,
    /** Summary requests answered so far. */
    summaries: async (): Promise<number> => (await (await fetch(`${origin}/stats`)).json()).summary,
    close: async () => void await process.stop(),
  };
}

/** A TCP port on 127.0.0.1 that was free when asked. */
export function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  listener.close();
  return listener.addr.port;
}

/** The environment a `deno` child needs besides the runtime's own variables. */
export function baseEnv(): Record<string, string> {
  const env: Record<string, string> = { NO_COLOR: "1" };
  for (const name of ["PATH", "HOME", "DENO_DIR", "TMPDIR"]) {
    const value = Deno.env.get(name);
    if (value) env[name] = value;
  }
  return env;
}

/** VmRSS and VmHWM (peak) of `pid`, in MiB (Linux; `cat` reads `/proc` under narrower flags than `-A`). */
export async function processMemory(pid: number): Promise<{ rssMiB: number; peakMiB: number }> {
  const { stdout } = await new Deno.Command("cat", { args: [`/proc/${pid}/status`] }).output();
  const status = new TextDecoder().decode(stdout);
  const kib = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(status)?.[1] ?? NaN);
  return { rssMiB: kib("VmRSS") / 1024, peakMiB: kib("VmHWM") / 1024 };
}

/** Starts a new VmHWM (peak) of `pid` at its current RSS (Linux: `5` written to `/proc/<pid>/clear_refs`). */
export async function resetPeakMemory(pid: number): Promise<void> {
  await new Deno.Command("sh", { args: ["-c", `echo 5 > /proc/${pid}/clear_refs`] }).output();
}

/** Count, median, p95 and p99 of samples (milliseconds unless a caller says otherwise). */
export type Distribution = ReturnType<typeof distribution>;

/** The `p`-th percentile (0–100) by nearest rank; NaN for no values. */
export function percentile(values: readonly number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted.length === 0
    ? NaN
    : sorted[Math.min(sorted.length, Math.max(1, Math.ceil((p / 100) * sorted.length))) - 1];
}

/** The median (the mean of the middle two for an even count); NaN for no values. */
export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

/** Count, median, p95 and p99 of `values`. */
export function distribution(values: readonly number[]) {
  const count = values.length;
  return { count, median: median(values), p95: percentile(values, 95), p99: percentile(values, 99) };
}
