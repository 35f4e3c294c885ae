/**
 * The load of the replica tests: clients spread over the replicas, sending turns on shared sessions for a
 * while, then every check of `_replica_checks.ts` on what the replicas wrote.
 */
import { readTrace } from "../src/trace/trace.ts";
import { startCrashProvider } from "../scripts/_fake_provider.ts";
import {
  type Acknowledged,
  acknowledgedProblems,
  compactionProblems,
  traceProblems,
  wholeTurnProblems,
} from "./_replica_checks.ts";
import { type ReplicaBackend, startReplicas } from "./_replicas.ts";

/** Options of {@linkcode runReplicaLoad}. */
export interface ReplicaLoadOptions {
  /** How long clients send turns, in milliseconds. @default {20000} */
  durationMs?: number;
  /** Replicas of `serve` on the one database. @default {2} */
  replicas?: number;
  /** Clients: client `i` sends to session `i % sessions` through replica `floor(i / sessions) % replicas`. @default {16} */
  clients?: number;
  /** Sessions the clients share. @default {4} */
  sessions?: number;
  /** AGENT_SESSION_LEASE_SECONDS of the replicas. @default {2} */
  leaseSeconds?: number;
}

/** What a load run did and found. */
export interface ReplicaLoadReport {
  /** Turns answered 200, per replica. */
  acknowledged: number[];
  /** Responses by status, over all clients. */
  statuses: Record<string, number>;
  /** Compactions traced (all of them, failed or not). */
  compactions: number;
  /** Turns traced (`run_start` events). */
  runs: number;
  /** Every violation found; empty when all held. */
  problems: string[];
}

/** A question the fake provider answers with tool calls (two in three) or at once. */
function question(client: number, n: number): string {
  if (n % 3 === 2) return `client ${client} turn ${n}: my name is C${client}x${n}`;
  return `client ${client} turn ${n}: what is ${client + 1}*${n + 2}?`;
}

/**
 * Starts the replicas (on `dir`, with a fake provider in this process; compaction after every turn past 2),
 * runs the clients for `durationMs`, stops the replicas, and checks: no interleaved turn and no turn number
 * twice (trace), no failed compaction, whole turns as stored, every acknowledged turn stored, the crash
 * invariants. Each problem is reported, never thrown.
 */
export async function runReplicaLoad(
  backend: ReplicaBackend,
  dir: string,
  options: ReplicaLoadOptions = {},
): Promise<ReplicaLoadReport> {
  const { durationMs = 20_000, replicas = 2, clients = 16, sessions = 4, leaseSeconds = 2 } = options;
  const provider = startCrashProvider({ seed: 7, maxDelayMs: 15 });
  const env = {
    OPENAI_BASE_URL: provider.url,
    AGENT_MAX_RAW_TURNS: "2",
    AGENT_COMPACT_BATCH: "0",
    AGENT_SESSION_LEASE_SECONDS: String(leaseSeconds),
  };
  const report: ReplicaLoadReport = { acknowledged: [], statuses: {}, compactions: 0, runs: 0, problems: [] };
  const acknowledged: Acknowledged[] = [];
  try {
    const running = await startReplicas(replicas, backend, dir, { env });
    report.acknowledged = running.map(() => 0);
    try {
      const until = Date.now() + durationMs;
      await Promise.all(Array.from({ length: clients }, async (_, client) => {
        const replica = Math.floor(client / sessions) % replicas;
        const sessionId = `shared-${client % sessions}`;
        for (let n = 0; Date.now() < until; n++) {
          const message = question(client, n);
          const response = await fetch(`${running[replica].url}/v1/sessions/${sessionId}/messages`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({ message }),
          });
          const body = await response.json();
          report.statuses[response.status] = (report.statuses[response.status] ?? 0) + 1;
          if (response.status === 200) {
            report.acknowledged[replica]++;
            acknowledged.push({ sessionId, turn: body.turn, message });
          } else if (response.status === 429) {
            await new Promise((resolve) => setTimeout(resolve, 100));
          } else {
            report.problems.push(
              `client ${client}: ${response.status} ${JSON.stringify(body).slice(0, 200)}`,
            );
          }
        }
      }));
    } finally {
      for (const [i, replica] of running.entries()) {
        const code = await replica.serve.stop();
        if (code !== 0) report.problems.push(`replica ${i} exited with ${code}: ${replica.serve.stderr()}`);
      }
    }
  } finally {
    await provider.close();
  }
  const tracePath = `${dir}/trace/traces.jsonl`;
  const events = readTrace(tracePath);
  report.runs = events.filter((e) => e.event === "run_start").length;
  report.compactions = events.filter((e) => e.event === "compact").length;
  report.problems.push(...traceProblems(events), ...compactionProblems(events));
  const store = await backend.open(dir);
  try {
    for (let i = 0; i < Math.min(sessions, clients); i++) {
      const key = { userId: "local", sessionId: `shared-${i}` };
      const session = await store.get(key);
      if (session === null) {
        report.problems.push(`session ${key.sessionId} was never stored`);
        continue;
      }
      const messages = await store.messages(key);
      const acks = acknowledged.filter((a) => a.sessionId === key.sessionId);
      report.problems.push(...wholeTurnProblems(key.sessionId, messages));
      report.problems.push(...acknowledgedProblems(session, messages, acks));
    }
  } finally {
    await store.close();
  }
  report.problems.push(...await backend.invariants(dir, tracePath));
  return report;
}
