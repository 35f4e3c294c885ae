/** The crash test's `chat` child, run with the task's own flags, and what it leaves on disk. @module */
import type { Api } from "./_fake_wires.ts";
import { existsSync } from "node:fs";
import { DatabaseSync } from "node:sqlite";
import { fileURLToPath } from "node:url";
import { taskPermissionFlags } from "../src/permissions.ts";
import { SqliteStore } from "../src/store/sqlite.ts";
import { isRecord } from "../src/_json.ts";
import type { CrashProvider, ProviderMoment } from "./_fake_provider.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
/** The session every round works on. */
export const CRASH_SESSION = "crash-1";
// `chat` runs as user "local" when `--user` is not given.
const CRASH_KEY = { userId: "local", sessionId: CRASH_SESSION };

/** The state of a crash run: its files, its provider, and how far its schedule got. */
export interface Run {
  /** The wire format the child speaks to the provider. */
  api: Api;
  dbPath: string;
  tracePath: string;
  provider: CrashProvider;
  seed: number;
  spawns: number;
  line: number;
  listener: ((moment: ProviderMoment) => void | Promise<void>) | null;
}

/** A running `chat` child. */
export interface Chat {
  child: Deno.ChildProcess;
  write(text: string): void;
  finish(): Promise<{ code: number; stdout: string; stderr: string }>;
}

/** Starts `chat` on the run's files, streaming or not. */
export function spawnChat(run: Run, stream: boolean): Chat {
  run.spawns++;
  const env: Record<string, string> = {
    OPENAI_BASE_URL: run.provider.url,
    LLM_API: run.api,
    ANTHROPIC_BASE_URL: run.provider.url.replace(/\/v1$/, ""),
    AGENT_DB_PATH: run.dbPath,
    AGENT_TRACE_PATH: run.tracePath,
    AGENT_MAX_RAW_TURNS: "2",
    // Compact after every answer past 2 turns, in the background: many chances to die in the middle of one.
    AGENT_COMPACT_BATCH: "0",
    AGENT_STREAM: stream ? "1" : "0",
    LLM_RETRIES: "0",
    // A killed chat keeps its session's lease until it expires: the next one waits a second, not thirty.
    AGENT_SESSION_LEASE_SECONDS: "1",
    NO_COLOR: "1",
  };
  for (const name of ["PATH", "HOME", "DENO_DIR"]) {
    const value = Deno.env.get(name);
    if (value) env[name] = value;
  }
  const args = [
    "run",
    "--no-prompt",
    ...taskPermissionFlags(env),
    "src/main.ts",
    "chat",
    "--session",
    CRASH_SESSION,
  ];
  const pipes = { stdin: "piped", stdout: "piped", stderr: "piped" } as const;
  const child = new Deno.Command(Deno.execPath(), { args, cwd: ROOT, env, clearEnv: true, ...pipes }).spawn();
  const stdout = new Response(child.stdout).text();
  const stderr = new Response(child.stderr).text();
  const writer = child.stdin.getWriter();
  let writing = Promise.resolve();
  const encoder = new TextEncoder();
  return {
    child,
    write: (text) => {
      // A killed child's stdin is a broken pipe: the line is simply lost, as it would be.
      writing = writing.then(() => writer.write(encoder.encode(`${text}\n`))).catch(() => {});
    },
    finish: async () => {
      await writing;
      await writer.close().catch(() => {});
      const { code } = await child.status;
      return { code, stdout: await stdout, stderr: await stderr };
    },
  };
}

/** The text of `path` from byte `offset` on; empty when the file does not exist. */
export function readFrom(path: string, offset: number): string {
  try {
    return new TextDecoder().decode(Deno.readFileSync(path).subarray(offset));
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return "";
    throw error;
  }
}

/** The size of `path`, 0 when it does not exist. */
export function fileSize(path: string): number {
  try {
    return Deno.statSync(path).size;
  } catch {
    return 0;
  }
}

/** The whole event lines of a trace excerpt (a torn last line is not one). */
export function wholeEvents(text: string): Record<string, unknown>[] {
  const events: Record<string, unknown>[] = [];
  for (const line of text.split("\n").slice(0, -1)) {
    try {
      const event = JSON.parse(line);
      if (isRecord(event)) events.push(event);
    } catch {
      // Reported by the invariant check.
    }
  }
  return events;
}

/**
 * The session's turn count, compacted turns, the ids of its stored calls and of its stored tool results; null
 * before it exists, or when the database cannot be read (the invariant check reports why).
 */
export async function readSession(
  dbPath: string,
): Promise<{ turns: number; compacted: number; callIds: Set<string>; toolIds: Set<string> } | null> {
  if (!existsSync(dbPath)) return null;
  let store: SqliteStore | null = null;
  try {
    store = new SqliteStore(dbPath);
    const session = await store.get(CRASH_KEY);
    if (session === null) return null;
    const messages = await store.messages(CRASH_KEY);
    const tools = messages.filter((m) => m.role === "tool");
    return {
      turns: session.turnCount,
      compacted: session.compactedTurns,
      callIds: new Set(messages.flatMap((m) => m.toolCalls ?? []).map((call) => call.id)),
      toolIds: new Set(tools.map((m) => m.toolCallId ?? "")),
    };
  } catch {
    return null;
  } finally {
    await store?.close();
  }
}

/**
 * Holds the trace file's exclusive lock until released: the child's next event line waits for it, and with it
 * the whole child (a line is written synchronously).
 */
export async function holdTraceLock(tracePath: string): Promise<{ release(): void }> {
  const file = await Deno.open(tracePath, { read: true, write: true });
  await file.lock(true);
  return {
    release() {
      try {
        file.unlockSync();
      } finally {
        file.close();
      }
    },
  };
}

/** Holds the database's write lock (`BEGIN IMMEDIATE`) until released: a writer in the child waits. */
export function holdWriteLock(dbPath: string): { release(): void } {
  const db = new DatabaseSync(dbPath);
  db.exec("PRAGMA busy_timeout = 2000");
  db.exec("BEGIN IMMEDIATE");
  return {
    release() {
      try {
        db.exec("ROLLBACK");
      } finally {
        db.close();
      }
    },
  };
}
