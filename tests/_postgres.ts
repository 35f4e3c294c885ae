/**
 * A throwaway PostgreSQL cluster for tests: `initdb` (as the `postgres` user when the tests run as root) in a
 * temporary folder, trust authentication, a free port on 127.0.0.1, fsync off. One cluster per test file,
 * started on first use and stopped (its folder removed) when the file's tests end; every test works in a
 * schema of its own ({@linkcode PostgresCluster.freshUrl}), so tests never see each other's rows.
 *
 * `.ci/run` installs Debian's `postgresql` when it is missing; where no cluster can be started the tests that
 * need one are ignored and the reason is printed once.
 * @module
 */
import { existsSync, readdirSync } from "node:fs";

/** A running cluster of this test file. */
export interface PostgresCluster {
  /** `postgres://postgres@127.0.0.1:<port>/postgres`: no password (trust authentication). */
  url: string;
  port: number;
  /** A URL whose connections work in a new, empty schema (`?search_path=`), so each test starts clean. */
  freshUrl(): Promise<string>;
  /** Runs SQL through `psql` as the superuser; resolves to its output. */
  psql(sql: string): Promise<string>;
  /** Stops the server (fast shutdown: open connections are closed). */
  stop(): Promise<void>;
  /** Starts it again on the same port and data. */
  start(): Promise<void>;
}

let started: Promise<PostgresCluster | string> | null = null;
let reasonShown = false;

/** The folder of `initdb`, `pg_ctl` and `psql`: Debian's newest version, or the PATH's. */
function binDir(): string | null {
  const debian = "/usr/lib/postgresql";
  if (existsSync(debian)) {
    const versions = readdirSync(debian).filter((v) => /^\d+$/.test(v)).sort((a, b) => Number(b) - Number(a));
    for (const v of versions) if (existsSync(`${debian}/${v}/bin/initdb`)) return `${debian}/${v}/bin`;
  }
  for (const dir of (Deno.env.get("PATH") ?? "").split(":")) {
    if (dir !== "" && existsSync(`${dir}/initdb`) && existsSync(`${dir}/pg_ctl`)) return dir;
  }
  return null;
}

let root: boolean | undefined;
/** Whether this runs as root (asked of `id`, which needs no `--allow-sys`). */
function isRoot(): boolean {
  root ??=
    new TextDecoder().decode(new Deno.Command("id", { args: ["-u"], stdout: "piped" }).outputSync().stdout)
      .trim() === "0";
  return root;
}

/** Runs a cluster tool, as `postgres` when root (initdb and the server refuse root). */
async function tool(bin: string, name: string, args: string[]): Promise<string> {
  const [command, full] = isRoot()
    ? ["runuser", ["-u", "postgres", "--", `${bin}/${name}`, ...args]]
    : [`${bin}/${name}`, args];
  const out = await new Deno.Command(command, { args: full, stdout: "piped", stderr: "piped" }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  if (!out.success) throw new Error(`${name} failed: ${text.trim().split("\n").slice(-3).join(" | ")}`);
  return text;
}

function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = listener.addr as Deno.NetAddr;
  listener.close();
  return port;
}

/**
 * Stops the cluster and removes its folder when this process ends: at once on a normal exit (`unload`), and
 * through a detached watchdog that polls this process otherwise (a failed test file ends without `unload`).
 */
function stopWhenDone(bin: string, dir: string): void {
  const stop = `${bin}/pg_ctl -D ${dir}/data -m immediate -s stop`;
  const asOwner = isRoot() ? `runuser -u postgres -- ${stop}` : stop;
  const script = `while kill -0 ${Deno.pid} 2>/dev/null; do sleep 1; done; ${asOwner}; rm -rf ${dir}`;
  const watchdog = new Deno.Command("sh", {
    args: ["-c", script],
    stdin: "null",
    stdout: "null",
    stderr: "null",
  })
    .spawn();
  watchdog.unref();
  globalThis.addEventListener("unload", () => {
    new Deno.Command("sh", { args: ["-c", `${asOwner}; rm -rf ${dir}`], stdout: "null", stderr: "null" })
      .outputSync();
  });
}

async function startCluster(): Promise<PostgresCluster> {
  const bin = binDir();
  if (bin === null) throw new Error("no initdb found (install the postgresql package)");
  const dir = Deno.makeTempDirSync({ prefix: "agent-pg-" });
  if (isRoot()) await new Deno.Command("chown", { args: ["postgres:", dir] }).output();
  const data = `${dir}/data`;
  await tool(bin, "initdb", ["-D", data, "-A", "trust", "-U", "postgres", "-N", "-E", "UTF8", "--locale=C"]);
  const port = freePort();
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off ` +
    "-c synchronous_commit=off -c max_connections=200";
  const pgCtl = (args: string[]) => tool(bin, "pg_ctl", ["-D", data, "-w", "-s", ...args]);
  const start = async () => {
    await pgCtl(["-l", `${dir}/log`, "-o", options, "start"]);
  };
  const stop = async () => {
    await pgCtl(["-m", "fast", "stop"]);
  };
  await start();
  stopWhenDone(bin, dir);
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  const psql = (sql: string) =>
    tool(bin, "psql", [
      "-h",
      "127.0.0.1",
      "-p",
      String(port),
      "-U",
      "postgres",
      "-d",
      "postgres",
      "-qAt",
      "-c",
      sql,
    ]);
  let schemas = 0;
  return {
    url,
    port,
    psql,
    stop,
    start,
    async freshUrl() {
      const schema = `t${Deno.pid}_${++schemas}`;
      await psql(`CREATE SCHEMA ${schema}`);
      return `${url}?search_path=${schema}`;
    },
  };
}

/**
 * This file's cluster, started on the first call; or, when none can be started, the reason (printed once).
 * Never rejects.
 */
export function postgresCluster(): Promise<PostgresCluster | string> {
  started ??= startCluster().catch((error: Error) => `cannot start PostgreSQL: ${error.message}`);
  return started.then((cluster) => {
    if (typeof cluster === "string" && !reasonShown) {
      reasonShown = true;
      console.error(`PostgreSQL tests ignored: ${cluster}`);
    }
    return cluster;
  });
}
