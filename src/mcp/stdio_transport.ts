/**
 * DenoStdioTransport: the MCP stdio transport on `Deno.Command`, so spawning a server is governed by Deno's
 * `--allow-run` and the child gets exactly the environment given (a few inherited names plus the config's
 * `env`), nothing else of this process. A line on stdout that is not JSON-RPC is skipped (reported to
 * `onerror`); a line over the size limit ends the connection. Its stderr is read as it comes (the child never
 * blocks on it) and its last lines kept, redacted ({@linkcode StderrTail}): {@linkcode DenoStdioTransport.stderr}.
 * @module
 */
import type { JSONRPCMessage } from "npm:@modelcontextprotocol/sdk@1.32.2/types.js";
import type { Transport } from "npm:@modelcontextprotocol/sdk@1.32.2/shared/transport.js";
import type { StdioServerConfig } from "./config.ts";
import { isRecord } from "../_json.ts";
import { StderrTail } from "./stderr_tail.ts";

/** Variables a server inherits from this process when they are set and readable (as the SDK's default). */
export const INHERITED_ENV: readonly string[] = ["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"];

/** Longest line read from a server: 16 MiB; more ends the connection. */
export const MAX_LINE_BYTES = 16 * 1024 * 1024;

/** How long a server may take to exit after its stdin is closed, before it is killed. */
const EXIT_GRACE_MS = 2000;

/** How long stderr may stay open after the child exited (a grandchild holds it) before it is no longer read. */
const STDERR_GRACE_MS = 500;

/**
 * What to start (a server entry's command and args), the child's whole environment, and the values its stderr
 * must not show (besides what looks like a token).
 */
export type DenoStdioParameters = Pick<StdioServerConfig, "command" | "args"> & {
  env: Record<string, string>;
  secrets?: readonly string[];
};

/** An MCP client transport over a child process's stdin and stdout. */
export class DenoStdioTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: (message: JSONRPCMessage) => void;
  #parameters: DenoStdioParameters;
  #child: Deno.ChildProcess | null = null;
  #writer: WritableStreamDefaultWriter<Uint8Array> | null = null;
  #reader: ReadableStreamDefaultReader<Uint8Array> | null = null;
  #reading: Promise<void> = Promise.resolve();
  #stderr: ReadableStreamDefaultReader<Uint8Array> | null = null;
  #draining: Promise<void> = Promise.resolve();
  #tail: StderrTail;
  #closed = false;

  constructor(parameters: DenoStdioParameters) {
    this.#parameters = parameters;
    this.#tail = new StderrTail({ secrets: parameters.secrets ?? [] });
  }

  /**
   * The last lines the server wrote to stderr, redacted, oldest first. Complete once `onclose` was called or
   * `close` resolved.
   */
  stderr(): readonly string[] {
    return this.#tail.lines();
  }

  /** Spawns the server; rejects when it cannot be (not allowed to run, not found). */
  // deno-lint-ignore require-await -- a spawn failure must be a rejection, as the SDK expects
  async start(): Promise<void> {
    const { command, args, env } = this.#parameters;
    const child = new Deno.Command(command, {
      args: [...args],
      env,
      clearEnv: true,
      stdin: "piped",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    this.#child = child;
    this.#writer = child.stdin.getWriter();
    this.#reader = child.stdout.getReader();
    this.#stderr = child.stderr.getReader();
    this.#draining = this.#drain(this.#stderr);
    this.#reading = this.#read(this.#reader).finally(() => this.#ended());
  }

  async #drain(reader: ReadableStreamDefaultReader<Uint8Array>): Promise<void> {
    try {
      while (true) {
        const { done, value } = await reader.read();
        if (done) break;
        this.#tail.push(value);
      }
    } catch { /* cancelled, or the pipe broke: what came is kept */ }
    this.#tail.end();
  }

  /** Waits up to {@linkcode STDERR_GRACE_MS} for stderr to end after the child exited, then stops reading it. */
  async #stderrEnded(): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const grace = new Promise<void>((resolve) => timer = setTimeout(resolve, STDERR_GRACE_MS));
    await Promise.race([this.#draining, grace]);
    clearTimeout(timer);
    await this.#stderr?.cancel().catch(() => {});
    await this.#draining;
  }

  async #read(reader: ReadableStreamDefaultReader<Uint8Array>): Promise<void> {
    const decoder = new TextDecoder();
    let pending = "";
    try {
      while (true) {
        const { done, value } = await reader.read();
        if (done) return;
        pending += decoder.decode(value, { stream: true });
        let newline: number;
        while ((newline = pending.indexOf("\n")) !== -1) {
          this.#deliver(pending.slice(0, newline).replace(/\r$/, ""));
          pending = pending.slice(newline + 1);
        }
        if (pending.length > MAX_LINE_BYTES) {
          this.onerror?.(new Error(`the server sent a line over ${MAX_LINE_BYTES} bytes`));
          await reader.cancel().catch(() => {});
          return;
        }
      }
    } catch (error) {
      if (!this.#closed) this.onerror?.(error instanceof Error ? error : new Error(String(error)));
    }
  }

  #deliver(line: string): void {
    if (line.trim() === "") return;
    let message: unknown;
    try {
      message = JSON.parse(line);
    } catch {
      this.onerror?.(new Error("the server printed a line that is not JSON-RPC; skipped"));
      return;
    }
    if (isRecord(message) && message.jsonrpc === "2.0") {
      this.onmessage?.(message as JSONRPCMessage);
    } else {
      this.onerror?.(new Error("the server printed JSON that is not JSON-RPC 2.0; skipped"));
    }
  }

  /** Its stdout ended: the server exited or closed it. Stops the child if it still runs, then says closed. */
  async #ended(): Promise<void> {
    const child = this.#child;
    if (child === null) return;
    this.#child = null;
    await this.#stop(child, "SIGKILL");
    // Its last words first: whoever hears of the close may ask for them.
    await this.#stderrEnded();
    this.onclose?.();
  }

  /** Closes the child's stdin and waits for its exit, sending it `signal` if it still runs after 2 s. */
  async #stop(child: Deno.ChildProcess, signal: Deno.Signal): Promise<void> {
    await this.#writer?.close().catch(() => {});
    this.#writer = null;
    const timer = setTimeout(() => {
      try {
        child.kill(signal);
      } catch { /* exited meanwhile */ }
    }, EXIT_GRACE_MS);
    await child.status;
    clearTimeout(timer);
  }

  /** Writes one message as a line. Rejects when the server has gone. */
  async send(message: JSONRPCMessage): Promise<void> {
    if (this.#writer === null) throw new Error("the server is not running");
    await this.#writer.write(new TextEncoder().encode(`${JSON.stringify(message)}\n`));
  }

  /** Closes the server's stdin, waits up to 2 s for it to exit, then kills it. Never rejects. */
  async close(): Promise<void> {
    this.#closed = true;
    const child = this.#child;
    if (child !== null) {
      await this.#stop(child, "SIGTERM");
      // A grandchild (npx's node) may hold stdout open after the child exited: stop reading it.
      await this.#reader?.cancel().catch(() => {});
      await this.#stderrEnded();
    }
    await this.#reading;
    await this.#draining;
  }
}
