/**
 * The HTTP server's lifecycle around `Deno.serve`: listen, listen again when accepting fails (every file
 * descriptor taken), and on stop refuse new requests (503), let running turns finish for the grace period,
 * abort the rest, and resolve once every response is done.
 * @module
 */
import { errorMessage } from "../errors.ts";
import { shuttingDown } from "./errors.ts";
import type { HandlerDeps } from "./deps.ts";
import { createHandler } from "./handler.ts";

/** What starts one listener: `Deno.serve`'s TCP form. */
export type Listen = (
  options: Deno.ServeTcpOptions,
  handler: Deno.ServeHandler<Deno.NetAddr>,
) => Deno.HttpServer<Deno.NetAddr>;

/** Options of {@linkcode serveHttp}. */
export interface ServeOptions {
  hostname: string;
  /** 0 picks a free port. */
  port: number;
  /** Aborting it starts the graceful shutdown (main wires SIGINT/SIGTERM to it). */
  stop: AbortSignal;
  /** How long running turns may finish after `stop`, in seconds. */
  graceSeconds: number;
  /** Called once the server listens, with its real address. @default {undefined} */
  onListen?: (address: { hostname: string; port: number }) => void;
  /**
   * The wait between attempts to listen again on the same port after accepting failed, in milliseconds.
   * @default {100}
   */
  relistenDelayMs?: number;
  /** Starts a listener; tests pass one whose accept loop fails. @default {Deno.serve} */
  listen?: Listen;
}

/** A running server: its port, and `finished`, which resolves when it has shut down after `stop`. */
export interface RunningServer {
  port: number;
  finished: Promise<void>;
}

/**
 * Starts the server with a handler built from `deps` minus the lifecycle parts, which this function owns.
 * Throws only if the first listen fails. Deno's accept loop ends at the first accept error (EMFILE once
 * connections hold every descriptor), closes the port and rejects its `finished`, which would end the
 * process: here that listener drains instead (a graceful shutdown closes its idle and half-sent connections
 * at once and lets running responses finish) and the port is listened on again every `relistenDelayMs`
 * until that succeeds. `finished` never rejects; it resolves after a graceful shutdown of every listener.
 */
export function serveHttp(
  deps: Omit<HandlerDeps, "shutdownSignal" | "isShuttingDown">,
  options: ServeOptions,
): RunningServer {
  const { hostname, port, stop, graceSeconds, onListen, relistenDelayMs = 100, listen = Deno.serve } =
    options;
  if (!Number.isFinite(relistenDelayMs) || relistenDelayMs < 0) {
    throw new RangeError(`Cannot serve: relistenDelayMs must be a number >= 0, got ${relistenDelayMs}`);
  }
  const turns = new AbortController();
  let stopping = false;
  // Loopback names are served on the listening port alone: known once the first listener is bound.
  const hosts = { ...deps.hosts, port: undefined as number | undefined };
  const handler = createHandler({
    ...deps,
    hosts,
    shutdownSignal: turns.signal,
    isShuttingDown: () => stopping,
  });
  // Every listener that may still hold connections: the current one and those draining after a failure.
  const servers = new Set<Deno.HttpServer<Deno.NetAddr>>();
  let retry: ReturnType<typeof setTimeout> | undefined;
  const start = (port: number, announce: boolean): Deno.HttpServer<Deno.NetAddr> => {
    const listening = ({ hostname, port }: Deno.NetAddr) => announce && onListen?.({ hostname, port });
    const server = listen({ hostname, port, onListen: listening }, handler);
    servers.add(server);
    server.finished.then(() => servers.delete(server), (error) => acceptFailed(server, error));
    return server;
  };
  const first = start(port, true);
  hosts.port = first.addr.port;
  const address = `${hostname}:${first.addr.port}`;
  const acceptFailed = (server: Deno.HttpServer<Deno.NetAddr>, error: unknown) => {
    if (stopping) return;
    const cause = errorMessage(error);
    deps.log(`cannot accept connections on ${address} (${cause}): closing its idle ones, listening again`);
    server.shutdown().catch(() => {}).finally(() => servers.delete(server));
    relisten(1);
  };
  const relisten = (attempt: number) => {
    retry = setTimeout(() => {
      retry = undefined;
      if (stopping) return;
      try {
        start(first.addr.port, false);
        deps.log(`listening again on ${address} (attempt ${attempt})`);
      } catch (error) {
        if (attempt === 1) {
          deps.log(`cannot listen again on ${address} yet (${errorMessage(error)}): retrying`);
        }
        relisten(attempt + 1);
      }
    }, relistenDelayMs);
  };
  const finished = new Promise<void>((resolve) => {
    const begin = async () => {
      stopping = true;
      clearTimeout(retry);
      deps.log(`shutting down: ${deps.sessions.active} turn(s) running, up to ${graceSeconds}s to finish`);
      const timer = setTimeout(() => {
        if (deps.sessions.active > 0) deps.log(`grace period over: aborting ${deps.sessions.active} turn(s)`);
        // The reason is also the answer of turns still waiting in a queue: a 503, as for any request now.
        turns.abort(shuttingDown());
      }, graceSeconds * 1000);
      // An MCP client's open stream of server messages would hold the shutdown: it ends now; calls run on.
      deps.mcp?.closeStreams();
      // shutdown() stops accepting at once and resolves when the in-flight responses are done.
      await Promise.all([...servers].map((server) => server.shutdown().catch(() => {})));
      clearTimeout(timer);
      turns.abort(shuttingDown());
      await deps.mcp?.close();
      resolve();
    };
    if (stop.aborted) begin();
    else stop.addEventListener("abort", begin, { once: true });
  });
  return { port: first.addr.port, finished };
}
