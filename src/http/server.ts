/**
 * The HTTP server's lifecycle around `Deno.serve`: listen, then on stop refuse new requests (503), let
 * running turns finish for the grace period, abort the rest, and resolve once every response is done.
 * @module
 */
import { HttpError } from "./errors.ts";
import type { HandlerDeps } from "./deps.ts";
import { createHandler } from "./handler.ts";

/** Options of {@linkcode serveHttp}. */
export interface ServeOptions {
  hostname: string;
  /** 0 picks a free port. */
  port: number;
  /** Aborting it starts the graceful shutdown (main wires SIGINT/SIGTERM to it). */
  stop: AbortSignal;
  /** How long running turns may finish after `stop`, in seconds. */
  graceSeconds: number;
  /** Called once the server listens, with its real address. */
  onListen?: (address: { hostname: string; port: number }) => void;
}

/** A running server. */
export interface RunningServer {
  port: number;
  /** Resolves when the server has shut down after `stop`. */
  finished: Promise<void>;
}

/**
 * Starts the server with a handler built from `deps` minus the lifecycle parts, which this function owns.
 * Never rejects once listening; `finished` resolves after a graceful shutdown.
 */
export function serveHttp(
  deps: Omit<HandlerDeps, "shutdownSignal" | "isShuttingDown">,
  options: ServeOptions,
): RunningServer {
  const { hostname, port, stop, graceSeconds, onListen } = options;
  const abortTurns = new AbortController();
  // The reason doubles as the answer for turns still waiting in a queue: 503, as for any request now.
  const reason = () =>
    new HttpError(503, "shutting_down", "The server is shutting down; retry elsewhere or later");
  let shuttingDown = false;
  const handler = createHandler({
    ...deps,
    shutdownSignal: abortTurns.signal,
    isShuttingDown: () => shuttingDown,
  });
  const server = Deno.serve({
    hostname,
    port,
    onListen: ({ hostname, port }) => onListen?.({ hostname, port }),
  }, handler);

  const finished = new Promise<void>((resolve) => {
    const begin = async () => {
      shuttingDown = true;
      deps.log(`shutting down: ${deps.queue.active} turn(s) running, up to ${graceSeconds}s to finish`);
      const timer = setTimeout(() => {
        if (deps.queue.active > 0) deps.log(`grace period over: aborting ${deps.queue.active} turn(s)`);
        abortTurns.abort(reason());
      }, graceSeconds * 1000);
      // shutdown() stops accepting at once and resolves when the in-flight responses are done.
      await server.shutdown();
      clearTimeout(timer);
      abortTurns.abort(reason());
      resolve();
    };
    if (stop.aborted) begin();
    else stop.addEventListener("abort", begin, { once: true });
  });
  return { port: server.addr.port, finished };
}
