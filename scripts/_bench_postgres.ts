/**
 * The bench's HTTP section on PostgreSQL: the HTTP load on `serve` with its sessions in a throwaway cluster,
 * one replica and two (clients spread over both), beside the same load on SQLite: turns/s and p99 per
 * client count. The cluster is the tests' (`tests/_postgres.ts`); without one the section says why.
 * @module
 */
import { postgresCluster } from "../tests/_postgres.ts";
import { type HttpResult, measureHttp } from "./_bench_serve.ts";

/** Options of {@linkcode measureHttpPostgres}. */
export interface HttpPostgresOptions {
  /** Client counts, each client on its own session. @default {[1, 16, 64]} */
  clients?: number[];
  /** Sequential turns per client. @default {20} */
  turnsPerClient?: number;
  /** The provider's fixed latency per response. @default {50} */
  latencyMs?: number;
}

/** One client count's figures: turns/s and p99 latency (ms) on each store, and the errors of all three. */
function compare(runs: Record<string, HttpResult>, clients: number) {
  const figures: Record<string, number> = {};
  let errors = 0;
  for (const [name, run] of Object.entries(runs)) {
    const row = run.rows.find((r) => r.clients === clients && r.sessions === "distinct")!;
    figures[`${name}TurnsPerSecond`] = row.turnsPerSecond;
    figures[`${name}P99Ms`] = row.latency.p99;
    errors += row.errors + run.exitCode;
  }
  return {
    ...figures,
    postgres1VsSqlite: figures.postgres1TurnsPerSecond / figures.sqliteTurnsPerSecond,
    errors,
  };
}

/** SQLite, PostgreSQL with 1 replica and with 2, one after another on the same load. */
export async function measureHttpPostgres(options: HttpPostgresOptions = {}) {
  const { clients = [1, 16, 64], turnsPerClient = 20, latencyMs = 50 } = options;
  const cluster = await postgresCluster();
  if (typeof cluster === "string") return { skipped: cluster };
  const load = { clients, turnsPerClient, latencyMs, sharedClients: 0 };
  const runs: Record<string, HttpResult> = {
    sqlite: await measureHttp(load),
    postgres1: await measureHttp({ ...load, databaseUrl: await cluster.freshUrl() }),
    postgres2: await measureHttp({ ...load, databaseUrl: await cluster.freshUrl(), replicas: 2 }),
  };
  return {
    latencyMs,
    turnsPerClient,
    ...Object.fromEntries(clients.map((n) => [`${n} clients`, compare(runs, n)])),
  };
}
