/**
 * The bench's subprocesses: spawn with piped output drained line by line (so a chatty child never blocks on
 * a full pipe), wait for a line, and stop with SIGTERM then SIGKILL after a grace period. Every process
 * started here is tracked until it is stopped, so one call can clean up on any path.
 * @module
 */
import { fileURLToPath } from "node:url";
import type { ProviderStats } from "./_bench_provider.ts";

/** The repository root (the folder holding `deno.json`). */
export const ROOT = fileURLToPath(new URL("..", import.meta.url));
const PROVIDER = fileURLToPath(new URL("./_bench_provider.ts", import.meta.url));
/** Lines of stderr kept for an error message. */
const TAIL_LINES = 30;

/** Options of {@linkcode ManagedProcess}. */
export interface ManagedProcessOptions {
  /** Environment of the child; with it, the parent's environment is not inherited. @default {undefined} */
  env?: Record<string, string>;
  /** @default {ROOT} */
  cwd?: string;
}

const live = new Set<ManagedProcess>();

/** A child process whose stdout and stderr are read to their end in the background. */
export class ManagedProcess {
  /** `performance.now()` just before the spawn. */
  readonly spawnedAt: number;
  readonly child: Deno.ChildProcess;
  #stdin: WritableStreamDefaultWriter<Uint8Array>;
  #stdinOpen = true;
  #lines: { text: string; at: number }[] = [];
  #waiters: (() => void)[] = [];
  #stderr: string[] = [];
  #drained: Promise<void>;
  #stopped: Promise<Deno.CommandStatus> | null = null;
  #exited = false;

  constructor(command: string, args: string[], options: ManagedProcessOptions = {}) {
    const { env, cwd = ROOT } = options;
    this.spawnedAt = performance.now();
    this.child = new Deno.Command(command, {
      args,
      cwd,
      env,
      clearEnv: env !== undefined,
      stdin: "piped",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    live.add(this);
    this.#stdin = this.child.stdin.getWriter();
    this.child.status.then(() => {
      this.#exited = true;
      this.#wake();
    });
    this.#drained = Promise.all([
      this.#read(this.child.stdout, (text, at) => {
        this.#lines.push({ text, at });
        this.#wake();
      }),
      this.#read(this.child.stderr, (text) => {
        this.#stderr.push(text);
        if (this.#stderr.length > TAIL_LINES) this.#stderr.shift();
      }),
    ]).then(() => {});
  }

  get pid(): number {
    return this.child.pid;
  }

  /** The last lines the child wrote to stderr. */
  get stderrTail(): string {
    return this.#stderr.join("\n");
  }

  /** Stdout lines so far, each with the `performance.now()` it was read at. */
  get lines(): readonly { text: string; at: number }[] {
    return this.#lines;
  }

  async #read(stream: ReadableStream<Uint8Array>, onLine: (text: string, at: number) => void): Promise<void> {
    let rest = "";
    try {
      for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
        const at = performance.now();
        const parts = (rest + chunk).split("\n");
        rest = parts.pop()!;
        for (const part of parts) onLine(part, at);
      }
    } catch {
      // The child died mid-write; what was read is kept.
    }
    if (rest !== "") onLine(rest, performance.now());
  }

  #wake(): void {
    for (const wake of this.#waiters.splice(0)) wake();
  }

  /**
   * Resolves with stdout line `index` (from 0) once it arrives. Rejects when the child exits first or after
   * `timeoutMs`, with the child's stderr in the message.
   */
  async line(index: number, timeoutMs: number): Promise<{ text: string; at: number }> {
    const deadline = performance.now() + timeoutMs;
    while (this.#lines.length <= index) {
      if (this.#exited) {
        await this.#drained;
        if (this.#lines.length > index) break;
        throw new Error(`The child exited before writing stdout line ${index + 1}:\n${this.stderrTail}`);
      }
      const left = deadline - performance.now();
      if (left <= 0) {
        throw new Error(`No stdout line ${index + 1} after ${timeoutMs} ms:\n${this.stderrTail}`);
      }
      let timer: ReturnType<typeof setTimeout> | undefined;
      await new Promise<void>((resolve) => {
        this.#waiters.push(resolve);
        timer = setTimeout(resolve, left);
      });
      clearTimeout(timer);
    }
    return this.#lines[index];
  }

  /** Writes to the child's stdin. */
  async write(text: string): Promise<void> {
    await this.#stdin.write(new TextEncoder().encode(text));
  }

  /** Closes the child's stdin (idempotent; an already gone child is fine). */
  async closeStdin(): Promise<void> {
    if (!this.#stdinOpen) return;
    this.#stdinOpen = false;
    await this.#stdin.close().catch(() => {});
  }

  /** Resolves with the exit status once the child has exited on its own, its output read. */
  async exited(): Promise<Deno.CommandStatus> {
    const status = await this.child.status;
    await this.closeStdin();
    await this.#drained;
    live.delete(this);
    return status;
  }

  /**
   * Stops the child: SIGTERM, then SIGKILL after `graceMs`. Resolves with its status once its output is read
   * to the end. Idempotent; never rejects.
   */
  stop(graceMs = 5000): Promise<Deno.CommandStatus> {
    this.#stopped ??= (async () => {
      if (!this.#exited) {
        try {
          this.child.kill("SIGTERM");
        } catch {
          // It exited between the check and the signal.
        }
      }
      let timer: ReturnType<typeof setTimeout> | undefined;
      const killed = new Promise<void>((resolve) => {
        timer = setTimeout(() => {
          try {
            this.child.kill("SIGKILL");
          } catch {
            // Already gone.
          }
          resolve();
        }, graceMs);
      });
      await Promise.race([this.child.status, killed]);
      clearTimeout(timer);
      return await this.exited();
    })();
    return this.#stopped;
  }
}

const dirs = new Set<string>();

/** A temporary folder, removed (with its contents) by `remove` or by {@linkcode cleanUpAll}. */
export async function makeTempDir(prefix: string): Promise<{ path: string; remove(): Promise<void> }> {
  const path = await Deno.makeTempDir({ prefix });
  dirs.add(path);
  return {
    path,
    remove: async () => {
      dirs.delete(path);
      await Deno.remove(path, { recursive: true }).catch(() => {});
    },
  };
}

/**
 * Stops every process this module started that is still running, then removes every temporary folder
 * still there: for a bench interrupted by a signal. Never rejects.
 */
export async function cleanUpAll(graceMs = 3000): Promise<void> {
  await Promise.all([...live].map((p) => p.stop(graceMs)));
  for (const path of [...dirs]) {
    dirs.delete(path);
    await Deno.remove(path, { recursive: true }).catch(() => {});
  }
}

/** A running `_bench_provider.ts` process. */
export interface BenchProvider {
  /** The base URL to configure (`OPENAI_BASE_URL`), ending in `/v1`. */
  url: string;
  port: number;
  process: ManagedProcess;
  /** The provider's request counts. */
  stats(): Promise<ProviderStats>;
  /** Stops it (closes its stdin, then SIGTERM, then SIGKILL). Never rejects. */
  close(): Promise<void>;
}

/** Options of {@linkcode startProvider}. */
export interface StartProviderOptions {
  /** Fixed delay before each answer. @default {0} */
  latencyMs?: number;
}

/** Starts the fake provider as a separate process and resolves once it listens. */
export async function startProvider(options: StartProviderOptions = {}): Promise<BenchProvider> {
  const { latencyMs = 0 } = options;
  const process = new ManagedProcess(Deno.execPath(), [
    "run",
    "--quiet",
    "--no-prompt",
    "--allow-net=127.0.0.1",
    PROVIDER,
    "--latency-ms",
    String(latencyMs),
  ]);
  let port: number;
  try {
    const first = await process.line(0, 20_000);
    port = Number(first.text.trim());
    if (!Number.isInteger(port) || port <= 0) throw new Error(`The provider printed ${first.text}`);
  } catch (error) {
    await process.stop();
    throw error;
  }
  const url = `http://127.0.0.1:${port}/v1`;
  return {
    url,
    port,
    process,
    stats: async () => {
      const response = await fetch(`http://127.0.0.1:${port}/stats`);
      return await response.json() as ProviderStats;
    },
    close: async () => {
      await process.closeStdin();
      await process.stop();
    },
  };
}

/** A free TCP port on 127.0.0.1 (free when asked; another process could take it before it is used). */
export function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = listener.addr as Deno.NetAddr;
  listener.close();
  return port;
}

/** The environment a `deno` child needs besides the runtime's own variables. */
export function baseEnv(): Record<string, string> {
  const env: Record<string, string> = { NO_COLOR: "1" };
  for (const name of ["PATH", "HOME", "DENO_DIR", "TMPDIR"]) {
    const value = Deno.env.get(name);
    if (value !== undefined && value !== "") env[name] = value;
  }
  return env;
}
