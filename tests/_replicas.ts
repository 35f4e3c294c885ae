/**
 * Several `serve` replicas on one database, for the tests of sessions shared across processes. A backend says
 * how a replica reaches the database and how a test reads it back, so the same tests run on each store.
 */
import {
  checkCrashInvariants,
  checkSessionInvariants,
  checkTraceInvariants,
} from "../scripts/_crash_invariants.ts";
import { PostgresStore } from "../src/store/postgres.ts";
import { SqliteStore } from "../src/store/sqlite.ts";
import type { SessionStore } from "../src/store/store.ts";
import { childEnv, SERVE_ARGS, type ServeProcess, spawnServe } from "./_harness.ts";
import { type PostgresCluster, postgresCluster } from "./_postgres.ts";

/** A database the replicas share: a SQLite file or a PostgreSQL database. */
export interface ReplicaBackend {
  /** Shown in test names. */
  name: string;
  /** What a replica's environment needs to use the database, for a test's temp folder `dir`. */
  env(dir: string): Record<string, string>;
  /** The store on that database, to read back what the replicas wrote; the caller closes it. */
  open(dir: string): Promise<SessionStore>;
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
  open: (dir) => Promise.resolve(new SqliteStore(`${dir}/db/sessions.db`)),
  invariants: (dir, tracePath) => checkCrashInvariants(`${dir}/db/sessions.db`, tracePath),
};

/**
 * A PostgreSQL database at `url` (a schema of its own on the run's cluster), shared by every replica;
 * the invariants are checked on every session of the user the tests run as, and on the trace file.
 */
export function postgresBackend(url: string): ReplicaBackend {
  return {
    name: "PostgreSQL database",
    env: () => ({ AGENT_DATABASE_URL: url }),
    open: () => PostgresStore.open(url),
    invariants: async (_dir, tracePath) => {
      const store = await PostgresStore.open(url);
      try {
        const sessions = await store.listSessions("local");
        const keys = sessions.map((session) => ({ userId: "local", sessionId: session.id }));
        return [...await checkSessionInvariants(store, keys), ...checkTraceInvariants(tracePath)];
      } finally {
        await store.close();
      }
    },
  };
}

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

/** The backends replicas run on: SQLite always, PostgreSQL where the run's throwaway cluster starts. */
export async function replicaBackends(): Promise<
  { name: string; ignore: boolean; make(): Promise<ReplicaBackend> }[]
> {
  const cluster = await postgresCluster();
  return [
    { name: SQLITE_BACKEND.name, ignore: false, make: () => Promise.resolve(SQLITE_BACKEND) },
    {
      name: "PostgreSQL database",
      ignore: typeof cluster === "string",
      make: async () => postgresBackend(await (cluster as PostgresCluster).freshUrl()),
    },
  ];
}
