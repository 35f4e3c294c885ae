/**
 * UserServers: an MCP server of `"scope": "user"`, one instance per user, so one user's calls never see
 * another's state (a stdio server's memory, an HTTP server's session). `${user}` in a stdio entry's `args`
 * and `env` values becomes the user's id, so a server that keeps files keeps each user's apart. The
 * instances are bounded in number (the least recently used idle one makes room) and stopped once idle; each
 * runs the same command with the same permissions. One more instance, started at start-up with `${user}`
 * empty and never called, lists the tools and reports the server's health.
 * @module
 */
import type { CallResult } from "./call_result.ts";
import type { McpServerConfig } from "./config.ts";
import { McpConnection, type McpConnectionOptions, type ServerHealth } from "./connection.ts";

/** Instances of one user-scoped server running at once, unless the options say otherwise. */
export const MAX_USERS = 16;
/** How long an instance may sit unused before it is stopped (10 minutes). */
export const USER_IDLE_MS = 10 * 60_000;

/** Options of {@linkcode UserServers}: those of each connection, and the bounds. */
export interface UserServersOptions extends McpConnectionOptions {
  /** Instances running at once. @default {MAX_USERS} */
  maxUsers?: number;
  /** Unused for this long, in milliseconds, an instance is stopped. @default {USER_IDLE_MS} */
  idleMs?: number;
}

interface Instance {
  connection: McpConnection;
  /** Its start: a call waits for it. */
  started: Promise<boolean>;
  /** Calls running on it now: an instance in a call is never stopped. */
  calls: number;
  lastUsed: number;
}

/** `config` for `userId`: `${user}` in a stdio entry's args and env values replaced by the id. */
export function forUser(config: McpServerConfig, userId: string): McpServerConfig {
  if (config.transport !== "stdio") return config;
  const fill = (text: string) => text.replaceAll("${user}", userId);
  const env = Object.fromEntries(Object.entries(config.env).map(([name, value]) => [name, fill(value)]));
  return { ...config, args: config.args.map(fill), env };
}

/** The instances of one user-scoped server. `call` rejects with one line fit for a tool error. */
export class UserServers {
  readonly #lister: McpConnection;
  readonly #options: UserServersOptions & { maxUsers: number; idleMs: number; now: () => number };
  readonly #users = new Map<string, Instance>();
  #sweeper: ReturnType<typeof setInterval> | undefined;
  /** Instances being stopped: `close` waits for them too. */
  readonly #stopping = new Set<Promise<void>>();

  constructor(readonly config: McpServerConfig, options: UserServersOptions) {
    const { maxUsers = MAX_USERS, idleMs = USER_IDLE_MS, now = Date.now } = options;
    if (!Number.isInteger(maxUsers) || maxUsers < 1) {
      throw new RangeError(`maxUsers must be a whole number of 1 or more, got ${maxUsers}`);
    }
    if (!(idleMs > 0)) throw new RangeError(`idleMs must be over 0, got ${idleMs}`);
    this.#options = { ...options, maxUsers, idleMs, now };
    this.#lister = new McpConnection(forUser(config, ""), options);
  }

  /** The tools the listing instance found. */
  get tools(): McpConnection["tools"] {
    return this.#lister.tools;
  }

  /** Starts the listing instance. Never throws. */
  start(): Promise<boolean> {
    return this.#lister.start();
  }

  /** The listing instance's health, with how many users' instances run. */
  health(): ServerHealth {
    return { ...this.#lister.health(), scope: "user", users: this.#users.size };
  }

  /** Calls `tool` on `userId`'s instance, started if it is not running. */
  async call(
    userId: string,
    tool: string,
    args: Record<string, unknown>,
    signal?: AbortSignal,
  ): Promise<CallResult> {
    const instance = await this.#instanceOf(userId);
    instance.calls++;
    try {
      // A failed start was said by the connection; the call then says why it cannot run.
      await instance.started;
      return await instance.connection.call(tool, args, signal);
    } finally {
      instance.calls--;
      instance.lastUsed = this.#options.now();
    }
  }

  /** Stops every instance. Never throws. */
  async close(): Promise<void> {
    clearInterval(this.#sweeper);
    this.#sweeper = undefined;
    const all = [...this.#users.values()].map((instance) => instance.connection);
    this.#users.clear();
    await Promise.all([...all, this.#lister].map((connection) => connection.close()));
    await Promise.all(this.#stopping);
  }

  #stop(userId: string, instance: Instance): Promise<void> {
    this.#users.delete(userId);
    const stopped = instance.connection.close().finally(() => this.#stopping.delete(stopped));
    this.#stopping.add(stopped);
    return stopped;
  }

  async #instanceOf(userId: string): Promise<Instance> {
    const running = this.#users.get(userId);
    if (running !== undefined) {
      // Most recently used last: the map's order is the eviction order.
      this.#users.delete(userId);
      this.#users.set(userId, running);
      return running;
    }
    if (this.#users.size >= this.#options.maxUsers) await this.#makeRoom();
    const connection = new McpConnection(forUser(this.config, userId), {
      ...this.#options,
      onToolsChanged: () => {},
    });
    const instance = { connection, started: connection.start(), calls: 0, lastUsed: this.#options.now() };
    this.#users.set(userId, instance);
    this.#sweeper ??= this.#startSweeper();
    return instance;
  }

  /** Stops the least recently used instance not in a call; rejects when every one is in a call. */
  async #makeRoom(): Promise<void> {
    for (const [userId, instance] of this.#users) {
      if (instance.calls > 0) continue;
      return await this.#stop(userId, instance);
    }
    throw new Error(
      `MCP server "${this.config.name}" runs for ${this.#options.maxUsers} users at once already; ` +
        "try again when one of their calls has ended",
    );
  }

  #startSweeper(): ReturnType<typeof setInterval> {
    const { idleMs, now } = this.#options;
    const timer = setInterval(() => {
      for (const [userId, instance] of this.#users) {
        if (instance.calls > 0 || now() - instance.lastUsed < idleMs) continue;
        void this.#stop(userId, instance);
      }
      if (this.#users.size === 0) {
        clearInterval(this.#sweeper);
        this.#sweeper = undefined;
      }
    }, Math.min(idleMs, 60_000));
    Deno.unrefTimer(timer); // an idle check never keeps the process alive
    return timer;
  }
}
