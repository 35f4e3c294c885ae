/**
 * Several `serve` replicas on one database, for the tests of sessions shared across processes. A backend says
 * how a replica reaches the database and how a test reads it back, so the same tests run on each store.
 */
import { checkCrashInvariants } from "../scripts/_crash_invariants.ts";
import { SqliteStore } from "../src/store/sqlite.ts";
import type { SessionStore } from "../src/store/store.ts";
import { childEnv, SERVE_ARGS, type ServeProcess, spawnServe } from "./_harness.ts";

/** A database the replicas share: SQLite here; another store plugs in with its own. */
export interface ReplicaBackend {
  /** Shown in test names. */
  name: string;
  /** What a replica's environment needs to use the database, for a test's temp folder `dir`. */
  env(dir: string): Record<string, string>;
  /** The store on that database, to read back what the replicas wrote; the caller closes it. */
  open(dir: string): SessionStore;
  /**
   * What a crash must never break in the database and the trace: `checkCrashInvariants` for SQLite; another
   * store can use `checkSessionInvariants` (on the sessions the test used) and `checkTraceInvariants`.
   */
  invariants(dir: string, tracePath: string): Promise<string[]>;
}

/** One SQLite file, `<dir>/db/sessions.db`, shared by every replica. */
export const SQLITE_BACKEND: ReplicaBackend = {
  name: "SQLite file",
  env: (dir) => ({ AGENT_DB_PATH: `${dir}/db/sessions.db` }),
  open: (dir) => new SqliteStore(`${dir}/db/sessions.db`),
  invariants: (dir, tracePath) => checkCrashInvariants(`${dir}/db/sessions.db`, tracePath),
};

/** A running replica. */
export interface Replica {
  serve: ServeProcess;
  /** Its base URL, `http://127.0.0.1:<port>`. */
  url: string;
}

/** Options of {@linkcode startReplicas}. */
export interface StartReplicasOptions {
  /** Settings of every replica besides the database's, the trace's (shared) and the port. @default {{}} */
  env?: Record<string, string>;
}

/**
 * Starts `count` replicas of `serve` on `backend`'s database in `dir`, each on a port of its own and all
 * appending to one trace, `<dir>/trace/traces.jsonl`; resolves once all listen. Throws (having stopped them)
 * when one cannot start.
 */
export async function startReplicas(
  count: number,
  backend: ReplicaBackend,
  dir: string,
  options: StartReplicasOptions = {},
): Promise<Replica[]> {
  const { env = {} } = options;
  const serves = Array.from(
    { length: count },
    () => spawnServe(SERVE_ARGS, childEnv(dir, { ...backend.env(dir), ...env, AGENT_PORT: "0" })),
  );
  await Promise.all(serves.map((serve) => serve.listening));
  const urls = serves.map((serve) => /listening on (http:\/\/\S+:\d+)/.exec(serve.stderr())?.[1]);
  if (urls.some((url) => url === undefined)) {
    const said = serves.map((serve) => serve.stderr()).join("\n");
    await Promise.all(serves.map((serve) => serve.stop()));
    throw new Error(`Cannot start ${count} replicas: ${said}`);
  }
  return serves.map((serve, i) => ({ serve, url: urls[i]! }));
}
