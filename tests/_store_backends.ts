/**
 * The store suite's backends: each test declared with {@linkcode storeTest} runs once per backend, as
 * `SqliteStore…` (a file in a temp folder) and `PostgresStore…` (a schema of its own in the run's throwaway
 * cluster). Where no cluster can be started the PostgreSQL runs are ignored and the reason printed once.
 * @module
 */
import { PostgresStore } from "../src/store/postgres.ts";
import { SqliteStore } from "../src/store/sqlite.ts";
import type { SessionStore } from "../src/store/store.ts";
import { postgresCluster } from "./_postgres.ts";

/** One database of a test: every `open` is another connection to the same data. */
export interface StoreDatabase extends AsyncDisposable {
  /** A new store on this database; the test closes it. */
  open(options?: { now?: () => Date }): Promise<SessionStore>;
  /** Where another process opens it: the SQLite file's path, or the PostgreSQL URL. */
  location: string;
}

/** A backend of the suite. */
export interface StoreBackend {
  /** The class name the tests' names start with. */
  name: "SqliteStore" | "PostgresStore";
  /** A new, empty database. */
  fresh(): Promise<StoreDatabase>;
  /** How many runs a property makes here, given its SQLite count (a network round trip costs more). */
  runs(sqliteRuns: number): number;
}

const cluster = await postgresCluster();

const sqlite: StoreBackend = {
  name: "SqliteStore",
  fresh() {
    const dir = Deno.makeTempDirSync({ prefix: "agent-store-" });
    return Promise.resolve({
      open: (options = {}) => Promise.resolve(new SqliteStore(`${dir}/s.db`, options)),
      location: `${dir}/s.db`,
      [Symbol.asyncDispose]: () => Deno.remove(dir, { recursive: true }),
    });
  },
  runs: (sqliteRuns) => sqliteRuns,
};

const postgres: StoreBackend = {
  name: "PostgresStore",
  async fresh() {
    if (typeof cluster === "string") throw new Error(cluster);
    const url = await cluster.freshUrl();
    return {
      open: (options = {}) => PostgresStore.open(url, options),
      location: url,
      [Symbol.asyncDispose]: () => Promise.resolve(),
    };
  },
  runs: (sqliteRuns) => Math.max(5, Math.round(sqliteRuns / 6)),
};

/** The backends, SQLite first. */
export const BACKENDS: readonly StoreBackend[] = [sqlite, postgres];

/** Options of {@linkcode storeTest}. */
export interface StoreTestOptions {
  /** Only these backends. @default {["SqliteStore", "PostgresStore"]} */
  only?: StoreBackend["name"][];
}

/**
 * Declares a test per backend: `$Store` in `name` becomes the backend's class name. `fn` gets a fresh
 * database (disposed afterwards) and the backend.
 */
export function storeTest(
  name: string,
  fn: (db: StoreDatabase, backend: StoreBackend) => Promise<void>,
  options: StoreTestOptions = {},
): void {
  const { only = ["SqliteStore", "PostgresStore"] } = options;
  for (const backend of BACKENDS) {
    if (!only.includes(backend.name)) continue;
    Deno.test({
      name: name.replaceAll("$Store", backend.name),
      ignore: backend === postgres && typeof cluster === "string",
      async fn() {
        await using db = await backend.fresh();
        await fn(db, backend);
      },
    });
  }
}
