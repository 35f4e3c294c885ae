/**
 * Throwaway PostgreSQL clusters for tests: `initdb` (as the `postgres` user when the tests run as root) in a
 * temporary folder, trust authentication, a free port on 127.0.0.1, fsync off. One cluster per test run,
 * started by the first file that asks and shared by every file of that `deno test` process (they find it
 * through a state folder named after the process); it stops, its folder removed, when the process ends. Every
 * test works in a schema of its own ({@linkcode PostgresCluster.freshUrl}), so tests never see each other's
 * rows. A file that stops and starts the server asks for a cluster of its own (`{ own: true }`).
 *
 * `.ci/run` installs Debian's `postgresql` when it is missing; where no cluster can be started the tests that
 * need one are ignored and the reason is printed once.
 * @module
 */
import { existsSync, readdirSync } from "node:fs";

/** A running cluster: the run's shared one, or a file's own. */
export interface PostgresCluster {
  /** `postgres://postgres@127.0.0.1:<port>/postgres`: no password (trust authentication). */
  url: string;
  port: number;
  /** A URL whose connections work in a new, empty schema (`?search_path=`), so each test starts clean. */
  freshUrl(): Promise<string>;
  /** Runs SQL through `psql` as the superuser; resolves to its output. */
  psql(sql: string): Promise<string>;
  /** Stops the server (fast shutdown: open connections are closed). Only a file's own cluster. */
  stop(): Promise<void>;
  /** Starts it again on the same port and data. Only a file's own cluster. */
  start(): Promise<void>;
}

/** Options of {@linkcode postgresCluster}. */
export interface PostgresClusterOptions {
  /**
   * A cluster of this file's own, stopped when the file's tests end, instead of the run's shared one: for a
   * file that stops and starts the server, which would pull the database from under other files.
   * @default {false}
   */
  own?: boolean;
}

/** Where a started cluster is: what the first file writes to the state folder for the others. */
interface ClusterState {
  bin: string;
  dir: string;
  port: number;
}

/** How many ports a start tries before giving up: another process may take a free port before the server binds it. */
const START_ATTEMPTS = 5;
/** How long a file waits for the file that starts the shared cluster (bounds a wait, never asserted). */
const SHARED_START_TIMEOUT_MS = 120_000;

let shared: Promise<PostgresCluster | string> | null = null;
let own: Promise<PostgresCluster | string> | null = null;
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

/** The shell command that stops the cluster in `dir` at once and removes `folders`. */
function stopCommand(bin: string, dir: string, folders: string[]): string {
  const stop = `${bin}/pg_ctl -D ${dir}/data -m immediate -s stop`;
  return `${isRoot() ? `runuser -u postgres -- ${stop}` : stop}; rm -rf ${folders.join(" ")}`;
}

/**
 * Runs `command` once this process has ended, through a detached watchdog that polls it (a process that fails
 * ends without `unload`).
 */
function whenProcessEnds(command: string): void {
  const script = `while kill -0 ${Deno.pid} 2>/dev/null; do sleep 1; done; ${command}`;
  new Deno.Command("sh", { args: ["-c", script], stdin: "null", stdout: "null", stderr: "null" }).spawn()
    .unref();
}

/** Initialises a cluster in a new temporary folder and starts it on a free port. */
async function createCluster(bin: string): Promise<ClusterState> {
  const dir = Deno.makeTempDirSync({ prefix: "agent-pg-" });
  if (isRoot()) await new Deno.Command("chown", { args: ["postgres:", dir] }).output();
  await tool(bin, "initdb", [
    "-D",
    `${dir}/data`,
    "-A",
    "trust",
    "-U",
    "postgres",
    "-N",
    "-E",
    "UTF8",
    "--locale=C",
  ]);
  for (let attempt = 1;; attempt++) {
    const port = freePort();
    try {
      await startServer(bin, dir, port);
      return { bin, dir, port };
    } catch (error) {
      // The port was free when asked, but another process bound it before the server did: take another.
      const log = existsSync(`${dir}/log`) ? Deno.readTextFileSync(`${dir}/log`) : "";
      if (attempt >= START_ATTEMPTS || !/could not bind|Address already in use/.test(log)) throw error;
    }
  }
}

/** Starts the server of the cluster in `dir` on `port`, its log (of this start only) in `dir/log`. */
async function startServer(bin: string, dir: string, port: number): Promise<void> {
  if (existsSync(`${dir}/log`)) Deno.removeSync(`${dir}/log`);
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off ` +
    "-c synchronous_commit=off -c max_connections=300";
  await tool(bin, "pg_ctl", ["-D", `${dir}/data`, "-w", "-s", "-l", `${dir}/log`, "-o", options, "start"]);
}

/** The cluster at `state`, whose URLs and `psql` reach it; `stop` and `start` act only when `owned`. */
function clusterAt(state: ClusterState, owned: boolean): PostgresCluster {
  const { bin, dir, port } = state;
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
  const ownOnly = (action: string) => {
    if (!owned) {
      throw new TypeError(
        `Cannot ${action} the run's shared PostgreSQL cluster: ask for postgresCluster({ own: true })`,
      );
    }
  };
  return {
    url,
    port,
    psql,
    async stop() {
      ownOnly("stop");
      await tool(bin, "pg_ctl", ["-D", `${dir}/data`, "-w", "-s", "-m", "fast", "stop"]);
    },
    async start() {
      ownOnly("start");
      await startServer(bin, dir, port);
    },
    async freshUrl() {
      // Random, not counted: every file of the run creates schemas in the shared cluster.
      const schema = `t${crypto.randomUUID().replaceAll("-", "").slice(0, 20)}`;
      await psql(`CREATE SCHEMA ${schema}`);
      return `${url}?search_path=${schema}`;
    },
  };
}

/** A cluster for this file alone, stopped at once when the file's tests end (or by the watchdog). */
async function startOwn(): Promise<PostgresCluster> {
  const bin = binDir();
  if (bin === null) throw new Error("no initdb found (install the postgresql package)");
  const state = await createCluster(bin);
  const stop = stopCommand(bin, state.dir, [state.dir]);
  whenProcessEnds(stop);
  globalThis.addEventListener("unload", () => {
    new Deno.Command("sh", { args: ["-c", stop], stdout: "null", stderr: "null" }).outputSync();
  });
  return clusterAt(state, true);
}

/**
 * The folder naming this run: test files run in one process, so its id and start time (which tell a reused
 * id apart) name the run.
 */
function runFolder(): string {
  let started = "";
  try {
    // `ps`, since Deno grants /proc/self only to --allow-all.
    const ps = new Deno.Command("ps", { args: ["-o", "lstart=", "-p", String(Deno.pid)], stdout: "piped" });
    started = new TextDecoder().decode(ps.outputSync().stdout).trim().replace(/[^A-Za-z0-9]+/g, "-");
  } catch {
    // No `ps`: the process id alone.
  }
  const tmp = Deno.env.get("TMPDIR") ?? "/tmp";
  return `${tmp}/agent-pg-run-${Deno.pid}-${started}`;
}

/**
 * The run's shared cluster: the first file to create the run folder starts it and writes where it is (or why
 * it could not start) to `cluster.json` there; every other file reads that once it appears.
 */
async function startShared(): Promise<PostgresCluster> {
  const run = runFolder();
  const stateFile = `${run}/cluster.json`;
  let first = true;
  try {
    Deno.mkdirSync(run);
  } catch (error) {
    if (!(error instanceof Deno.errors.AlreadyExists)) throw error;
    first = false;
  }
  if (first) {
    let state: ClusterState | { error: string };
    try {
      const bin = binDir();
      if (bin === null) throw new Error("no initdb found (install the postgresql package)");
      state = await createCluster(bin);
      whenProcessEnds(stopCommand(bin, state.dir, [state.dir, run]));
    } catch (error) {
      state = { error: (error as Error).message };
      whenProcessEnds(`rm -rf ${run}`);
    }
    // Written whole, then renamed: a reader never sees half of it.
    Deno.writeTextFileSync(`${stateFile}.tmp`, JSON.stringify(state));
    Deno.renameSync(`${stateFile}.tmp`, stateFile);
  }
  const deadline = Date.now() + SHARED_START_TIMEOUT_MS;
  while (!existsSync(stateFile)) {
    if (Date.now() > deadline) throw new Error(`the run's shared cluster did not start (${run})`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const state: ClusterState | { error: string } = JSON.parse(Deno.readTextFileSync(stateFile));
  if ("error" in state) throw new Error(state.error);
  return clusterAt(state, false);
}

/**
 * The run's shared cluster (or with `own`, this file's), started on the first call; or, when none can be
 * started, the reason (printed once). Never rejects.
 */
export function postgresCluster(options: PostgresClusterOptions = {}): Promise<PostgresCluster | string> {
  const { own: ownCluster = false } = options;
  const started = ownCluster
    ? own ??= startOwn().catch((error: Error) => `cannot start PostgreSQL: ${error.message}`)
    : shared ??= startShared().catch((error: Error) => `cannot start PostgreSQL: ${error.message}`);
  return started.then((cluster) => {
    if (typeof cluster === "string" && !reasonShown) {
      reasonShown = true;
      console.error(`PostgreSQL tests ignored: ${cluster}`);
    }
    return cluster;
  });
}
