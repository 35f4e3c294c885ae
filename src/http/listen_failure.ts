/**
 * Why the server could not listen, and what to do, by the error Deno threw: one line for `serve` to print.
 * @module
 */
import type { Config } from "../config.ts";
import { errorMessage } from "../errors.ts";

/** Why the server could not listen, and what to do, by the error Deno threw. */
const LISTEN_FAILURES: [
  new (...args: never[]) => Error,
  (config: Readonly<Pick<Config, "host">>) => string,
][] = [
  [
    Deno.errors.AddrInUse,
    () => "the port is already in use; stop the other server, or set AGENT_PORT to a free port (0 picks one)",
  ],
  [
    Deno.errors.AddrNotAvailable,
    (c) => `${c.host} is not an address of this machine; set AGENT_HOST to one (127.0.0.1 for loopback)`,
  ],
  [
    Deno.errors.PermissionDenied,
    () => "the system does not allow it (ports below 1024 need privileges); set AGENT_PORT to 1024 or above",
  ],
];

/** What to say when listening failed with `error`: the known cause and its remedy, or the error's message. */
export function listenFailure(error: unknown, config: Readonly<Pick<Config, "host">>): string {
  const known = LISTEN_FAILURES.find(([type]) => error instanceof type);
  return known?.[1](config) ?? errorMessage(error);
}
