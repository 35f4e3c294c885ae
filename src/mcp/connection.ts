/**
 * McpConnection: one configured MCP server, over stdio or HTTP. It starts the server and lists its tools
 * within the start deadline (trying again in the background while that fails), calls a tool within the call
 * deadline (each progress notification of the call starts it again, up to {@linkcode PROGRESS_LIMIT} times it
 * in all), notices the server's death and restarts it on the next call (at most 3 times in 5 minutes, then
 * its tools report "unavailable"), starts a new session with an HTTP server that lost its own (and tries the
 * call once more), and follows the server's `notifications/tools/list_changed`. A stdio server that fails to
 * start or dies says why with the last lines of its stderr, redacted. Nothing here prints a header or an env
 * value.
 * @module
 */
import { errorMessage } from "../errors.ts";
import { backoffDelay, type BackoffOptions } from "../retry.ts";
import { shorten } from "../shorten.ts";
import type { McpServerConfig } from "./config.ts";
import type { CallResult } from "./call_result.ts";
import type { McpSdk } from "./sdk.ts";
import { readEnvironment } from "../config.ts";
import { DenoStdioTransport, INHERITED_ENV } from "./stdio_transport.ts";

/** Restarts allowed within {@linkcode RESTART_WINDOW_MS}. */
export const MAX_RESTARTS = 3;
/** The window restarts are counted in (5 minutes). */
export const RESTART_WINDOW_MS = 5 * 60_000;
/** How many deadlines a call that keeps reporting progress may take in all. */
export const PROGRESS_LIMIT = 10;

/**
 * `starting`; `ready`; `failed`: did not start or list (its tools are absent; tried again in the background
 * until it starts); `down`: died, restarted on
 * next use; `unavailable`: died more often than allowed; `closed`: the process is shutting down.
 */
export type ServerState = "starting" | "ready" | "failed" | "down" | "unavailable" | "closed";

/** A tool as the server lists it. */
export interface ListedTool {
  name: string;
  description?: string;
  inputSchema: Record<string, unknown>;
  /** Whether the tool runs as an MCP task: `"required"` ones are not offered. */
  execution?: { taskSupport?: string };
  /** Hints the server gives: a tool that only reads, or whose repeated call changes nothing, is safe to repeat. */
  annotations?: { readOnlyHint?: unknown; idempotentHint?: unknown };
}

/** What `/healthz` says of a server. */
export interface ServerHealth {
  state: ServerState;
  transport: "stdio" | "http" | "sse";
  tools: number;
  restarts: number;
  /** Why it is not ready, when it is not. */
  error: string | null;
  /** A stdio server that failed to start or died: the last lines of its stderr, redacted (absent when none). */
  stderr?: readonly string[];
  /** `user` for a server with an instance per user ({@linkcode UserServers} in `user_servers.ts`). */
  scope?: "user";
  /** How many users' instances run now, for a `user` scope. */
  users?: number;
}

/** Options of {@linkcode McpConnection}. */
export interface McpConnectionOptions {
  /** The SDK, loaded. Required. */
  sdk: McpSdk;
  /** Deadline of each call, in milliseconds. @default {10000} */
  timeoutMs?: number;
  /** Deadline of start plus listing, in milliseconds: a cold `npx -y` fetches its package first. @default {60000} */
  startTimeoutMs?: number;
  /**
   * The longest a call may take when the server's progress notifications keep starting its deadline again,
   * in milliseconds.
   * @default {PROGRESS_LIMIT * timeoutMs}
   */
  maxCallMs?: number;
  /** Told when the tool list changed after start (a restart or the server's notification). @default {() => {}} */
  onToolsChanged?: () => void;
  /** One line for people, when the server failed or came back. @default {() => {}} */
  warn?: (line: string) => void;
  /** The clock restarts are counted with, in milliseconds. @default {Date.now} */
  now?: () => number;
  /**
   * The waits before trying again, in the background, a server that failed to start.
   * @default {RETRY_BACKOFF}
   */
  retry?: BackoffOptions;
  /** How an HTTP or SSE server is reached. @default {globalThis.fetch} */
  fetch?: typeof fetch;
}

/** Characters of stderr's last lines quoted in the one-line error (`/healthz` has them whole). */
const STDERR_IN_ERROR_CHARS = 500;

/** A server that failed to start is tried again after 1 s, doubling to at most a minute, ±20%. */
export const RETRY_BACKOFF: BackoffOptions = {
  minTimeout: 1000,
  multiplier: 2,
  maxTimeout: 60_000,
  jitter: 0.2,
};

type Client = InstanceType<McpSdk["Client"]>;

/** A client for one server. `call` rejects with a message fit for a tool error; nothing else throws. */
export class McpConnection {
  #options: Required<McpConnectionOptions>;
  #client: Client | null = null;
  #state: ServerState = "starting";
  #error: string | null = null;
  /** The last stderr lines of a stdio server that failed or died; empty while it runs. */
  #stderr: readonly string[] = [];
  #tools: readonly ListedTool[] = [];
  #restarts: number[] = [];
  #starting: Promise<boolean> | null = null;
  /** The client of the start in flight, closed by `close` so that start ends at once. */
  #connecting: Client | null = null;
  /** The next background try of a server that failed to start, and how many came before it. */
  #retry: { timer?: ReturnType<typeof setTimeout>; tries: number } = { tries: 0 };

  constructor(readonly config: McpServerConfig, options: McpConnectionOptions) {
    const { sdk, timeoutMs = 10_000, onToolsChanged = () => {}, warn = () => {}, now = Date.now } = options;
    const { maxCallMs = PROGRESS_LIMIT * timeoutMs, startTimeoutMs = 60_000, retry = RETRY_BACKOFF } =
      options;
    const { fetch = (input, init) => globalThis.fetch(input, init) } = options;
    backoffDelay(0, retry); // checks the options
    if (!(timeoutMs > 0)) throw new RangeError(`timeoutMs must be over 0, got ${timeoutMs}`);
    if (!(startTimeoutMs > 0)) throw new RangeError(`startTimeoutMs must be over 0, got ${startTimeoutMs}`);
    if (!(maxCallMs >= timeoutMs)) {
      throw new RangeError(`maxCallMs must be at least timeoutMs (${timeoutMs}), got ${maxCallMs}`);
    }
    this.#options = { sdk, timeoutMs, startTimeoutMs, maxCallMs, onToolsChanged, warn, now, retry, fetch };
  }

  /** The tools listed at the last start or change; empty unless the server started. */
  get tools(): readonly ListedTool[] {
    return this.#tools;
  }

  /** The server's state and counts, for health reports. */
  health(): ServerHealth {
    const restarts = this.#restarts.length;
    const { transport } = this.config;
    const health = { state: this.#state, transport, tools: this.#tools.length, restarts, error: this.#why() };
    return this.#stderr.length === 0 ? health : { ...health, stderr: this.#stderr };
  }

  /**
   * Starts the server and lists its tools; false (state `failed`, one warning) when it cannot, and then it is
   * tried again in the background until it starts. Never throws.
   */
  async start(): Promise<boolean> {
    const ok = await this.#connectOnce();
    if (!ok) {
      this.#options.warn(`MCP server "${this.config.name}" is not available: ${this.#why()}`);
      this.#retryLater();
    }
    return ok;
  }

  #connectOnce(): Promise<boolean> {
    return this.#starting ??= this.#connect().finally(() => this.#starting = null);
  }

  /**
   * Tries a server that failed to start again after a backoff, and again while it fails (quietly: its first
   * failure was said); once it starts, says so and hands on its tools.
   */
  #retryLater(): void {
    if (this.#closed() || this.#retry.timer !== undefined) return;
    const wait = backoffDelay(this.#retry.tries++, this.#options.retry);
    this.#error = `${this.#error}; trying again in ${Math.ceil(wait / 1000)} s`;
    const timer = setTimeout(async () => {
      this.#retry.timer = undefined;
      if (this.#state !== "failed") return; // started by a call meanwhile, or closed
      if (!await this.#connectOnce()) return this.#retryLater();
      this.#retry.tries = 0;
      this.#options.warn(`MCP server "${this.config.name}" is available again`);
      this.#options.onToolsChanged();
    }, wait);
    Deno.unrefTimer(timer); // a retry never keeps the process alive
    this.#retry.timer = timer;
  }

  async #connect(): Promise<boolean> {
    const { sdk, startTimeoutMs: timeoutMs } = this.#options;
    // A server that failed stays so, and says why, until a try starts it.
    if (this.#state !== "failed") this.#state = "starting";
    const client = new sdk.Client({ name: "mini-runtime-agent", version: "1" }, {
      // No debounce: its timer would outlive a client closed meanwhile.
      listChanged: {
        tools: {
          debounceMs: 0,
          onChanged: (error: Error | null, tools: unknown[] | null) =>
            this.#listChanged(client, error, tools),
        },
      },
    });
    this.#connecting = client;
    const transport = this.#transport();
    try {
      await client.connect(transport, { timeout: timeoutMs });
      const listed = await client.listTools(undefined, { timeout: timeoutMs });
      if (this.#closed()) throw new Error("closed while starting");
      client.onclose = () => this.#died(client, transport);
      this.#client = client;
      this.#tools = listed.tools as ListedTool[];
      this.#state = "ready";
      this.#error = null;
      this.#stderr = [];
      return true;
    } catch (error) {
      // Closed first: a stdio server's stderr is then read to its end.
      await client.close().catch(() => {});
      if (!this.#closed()) this.#state = "failed";
      this.#stderr = stderrOf(transport);
      this.#error = `cannot start or list its tools: ${oneLine(error)}`;
      return false;
    } finally {
      this.#connecting = null;
    }
  }

  /** Why it is not ready, with the last of its stderr; null when it is. */
  #why(): string | null {
    return this.#error === null ? null : `${this.#error}${quoted(this.#stderr)}`;
  }

  /** Whether `close` was called, read afresh after an await. */
  #closed(): boolean {
    return this.#state === "closed";
  }

  #transport() {
    const { sdk } = this.#options;
    const { config } = this;
    if (config.transport === "stdio") {
      const { command, args, env } = config;
      const inherited = Object.entries(readEnvironment(INHERITED_ENV))
        .filter((entry): entry is [string, string] => entry[1] !== undefined);
      // The entry's env values and what it took from the environment never show in its stderr's lines.
      const secrets = [...Object.values(env), ...config.secrets ?? []];
      return new DenoStdioTransport({
        command,
        args,
        env: { ...Object.fromEntries(inherited), ...env },
        secrets,
      });
    }
    const requestInit = { headers: { ...config.headers } };
    const { fetch } = this.#options;
    return config.transport === "sse"
      ? new sdk.SSEClientTransport(new URL(config.url), { requestInit, fetch })
      : new sdk.StreamableHTTPClientTransport(new URL(config.url), {
        requestInit,
        fetch: quietOnClose(fetch),
      });
  }

  #died(client: Client, transport: unknown): void {
    if (this.#client !== client || this.#state === "closed") return;
    this.#client = null;
    this.#state = "down";
    this.#stderr = stderrOf(transport);
    this.#error = "the server exited";
  }

  #listChanged(client: Client, error: Error | null, tools: unknown[] | null): void {
    if (this.#client !== client || error !== null || tools === null) return;
    this.#tools = tools as ListedTool[];
    this.#options.onToolsChanged();
  }

  /** A ready client: the running one, or the server restarted when it died and the restart budget allows. */
  async #ready(): Promise<Client> {
    if (this.#client !== null && this.#state === "ready") return this.#client;
    const now = this.#options.now();
    this.#restarts = this.#restarts.filter((at) => now - at < RESTART_WINDOW_MS);
    if (this.#state === "down" || this.#state === "failed") {
      if (this.#restarts.length >= MAX_RESTARTS) {
        this.#state = "unavailable";
      } else {
        this.#restarts.push(now);
        const before = JSON.stringify(this.#tools.map((tool) => tool.name));
        const started = await this.start();
        if (started && JSON.stringify(this.#tools.map((tool) => tool.name)) !== before) {
          this.#options.onToolsChanged();
        }
        if (started) return this.#client!;
      }
    }
    if (this.#state === "unavailable") {
      throw new Error(
        `MCP server "${this.config.name}" is unavailable: it stopped ${MAX_RESTARTS} times within 5 minutes`,
      );
    }
    throw new Error(`MCP server "${this.config.name}" is ${this.#state}: ${this.#why() ?? "not started"}`);
  }

  /**
   * Calls `tool` with `args` within the deadline (and `signal`), which each progress notification starts
   * again up to `maxCallMs` in all. Rejects with one line when the server is
   * down, unavailable, timed out or failed the request; resolves to the server's result, `isError` included.
   */
  async call(tool: string, args: Record<string, unknown>, signal?: AbortSignal): Promise<CallResult> {
    const request = { name: tool, arguments: args };
    const options = {
      timeout: this.#options.timeoutMs,
      // Asking for progress: a long tool that reports it is not cut off at the first deadline.
      onprogress: () => {},
      resetTimeoutOnProgress: true,
      maxTotalTimeout: this.#options.maxCallMs,
      signal,
    };
    let client = await this.#ready();
    try {
      try {
        return await client.callTool(request, undefined, options) as CallResult;
      } catch (error) {
        if (!sessionLost(error) || this.#client !== client) throw error;
        // The server forgot this session (it restarted): the spec says start a new one. The call is tried
        // once more on it: a server answers 404 before it runs anything of the request.
        this.#options.warn(`MCP server "${this.config.name}" lost its session; starting a new one`);
        this.#client = null;
        await client.close().catch(() => {});
        if (!await this.start()) throw error;
        client = this.#client!;
        return await client.callTool(request, undefined, options) as CallResult;
      }
    } catch (error) {
      throw new Error(`MCP server "${this.config.name}": ${oneLine(error)}`);
    }
  }

  /**
   * Stops the server (its child process, or its HTTP session); a start in flight (a background try, or a
   * call's restart) is cut short and waited for, so nothing of this connection runs after. Never throws.
   */
  async close(): Promise<void> {
    this.#state = "closed";
    clearTimeout(this.#retry.timer);
    this.#retry.timer = undefined;
    const clients = [this.#client, this.#connecting];
    this.#client = null;
    await Promise.all(clients.map((client) => client?.close().catch(() => {})));
    await this.#starting;
  }
}

/**
 * `fetchFn` for the Streamable HTTP transport, except that a GET its `close` aborted answers 405 ("no stream
 * here") instead of failing. The SDK (1.32.2) tries a lost GET stream again on a timer, and when a try in
 * flight fails it sets the next one without asking whether the transport closed meanwhile: that timer would
 * outlive the closed client. A 405 it takes quietly, as the end of the stream.
 */
function quietOnClose(fetchFn: typeof fetch): typeof fetch {
  return async (input, init) => {
    try {
      return await fetchFn(input, init);
    } catch (error) {
      if (init?.method !== "GET" || init.signal?.aborted !== true) throw error;
      return new Response(null, { status: 405 });
    }
  };
}

/**
 * Whether `error` is Streamable HTTP's answer for a session the server does not know: 404 as the spec says,
 * or the 400 "No valid session ID provided" of servers built on the SDK's own transport.
 */
function sessionLost(error: unknown): boolean {
  const code = (error as { code?: unknown })?.code;
  return code === 404 || (code === 400 && /session/i.test(errorMessage(error)));
}

/** The last stderr lines of a stdio server's transport; none for HTTP. */
function stderrOf(transport: unknown): readonly string[] {
  return transport instanceof DenoStdioTransport ? transport.stderr() : [];
}

/** `; stderr: a | b` with the last of `lines` that fit in {@linkcode STDERR_IN_ERROR_CHARS}; empty for none. */
function quoted(lines: readonly string[]): string {
  if (lines.length === 0) return "";
  const text = lines.map((line) => line.trim()).join(" | ");
  const tail = text.length <= STDERR_IN_ERROR_CHARS ? text : `…${text.slice(-STDERR_IN_ERROR_CHARS)}`;
  return `; stderr: ${tail}`;
}

function oneLine(error: unknown): string {
  return shorten(errorMessage(error), 300, { oneLine: true, withinMax: true });
}
