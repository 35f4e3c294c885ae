/**
 * The HTTP server's lifecycle around `Deno.serve`: listen, then on stop refuse new requests (503), let
 * running turns finish for the grace period, abort the rest, and resolve once every response is done.
 * @module
 */
import { shuttingDown } from "./errors.ts";
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
  /** Called once the server listens, with its real address. @default {undefined} */
  onListen?: (address: { hostname: string; port: number }) => void;
}

/** A running server: its port, and `finished`, which resolves when it has shut down after `stop`. */
export interface RunningServer {
  port: number;
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
  const turns = new AbortController();
  let stopping = false;
  const handler = createHandler({ ...deps, shutdownSignal: turns.signal, isShuttingDown: () => stopping });
  const listening = ({ hostname, port }: Deno.NetAddr) => onListen?.({ hostname, port });
  const server = Deno.serve({ hostname, port, onListen: listening }, handler);
  const finished = new Promise<void>((resolve) => {
    const begin = async () => {
      stopping = true;
      deps.log(`shutting down: ${deps.queue.active} turn(s) running, up to ${graceSeconds}s to finish`);
      const timer = setTimeout(() => {
        if (deps.queue.active > 0) deps.log(`grace period over: aborting ${deps.queue.active} turn(s)`);
        // The reason is also the answer of turns still waiting in a queue: a 503, as for any request now.
        turns.abort(shuttingDown());
      }, graceSeconds * 1000);
      // shutdown() stops accepting at once and resolves when the in-flight responses are done.
      await server.shutdown();
      clearTimeout(timer);
      turns.abort(shuttingDown());
      resolve();
    };
    if (stop.aborted) begin();
    else stop.addEventListener("abort", begin, { once: true });
  });
  return { port: server.addr.port, finished };
}
