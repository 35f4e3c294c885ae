/**
 * The bench's readable report: one table per section, then the targets met or missed. Pure.
 * @module
 */
import type { BenchReport } from "./bench.ts";
import { type Distribution, table } from "./_bench_stats.ts";

function ms(value: number): number {
  return Number.isFinite(value) ? Math.round(value * 100) / 100 : NaN;
}

function x(value: number): string {
  return Number.isFinite(value) ? `${value.toFixed(2)}×` : "n/a";
}

function pct(value: number): string {
  return `${(value * 100).toFixed(1)}%`;
}

function verdict(ok: boolean | null): string {
  return ok === null ? "not run" : ok ? "met" : "MISSED";
}

function dist(name: string, d: Distribution, extra = ""): (string | number)[] {
  return [name, d.count, ms(d.median), ms(d.p95), extra];
}

function overheadSection(report: BenchReport): string[] {
  const o = report.overhead;
  if (o === undefined) return [];
  const header = ["variant", "turns", "median ms", "p95 ms", "ratio to B (median)"];
  return [
    `1. Per-turn overhead — calculator turn (2 model calls), 0-latency provider process, ` +
    `${o.rounds} rounds × ` +
    `${o.turnsPerRound} turns, A D B C interleaved by round, A and D on a session ${o.session}`,
    table(header, [
      dist("A runtime: runTurn, full stack", o.runtime, x(o.ratio)),
      dist("D runtime persisting nothing (store in memory, no trace)", o.inMemory, x(o.inMemoryRatio)),
      dist("B floor: the 2 chat bodies, plain fetch", o.floor, "1.00×"),
      dist(
        "C floor + the summary calls A made",
        o.floorWithSummaries,
        x(o.floorWithSummaries.median / o.floor.median),
      ),
      dist("A, turns before compaction is due", o.beforeCompaction.runtime, x(o.beforeCompaction.ratio)),
      dist("D, same turns", o.beforeCompaction.inMemory, x(o.beforeCompaction.inMemoryRatio)),
      dist("B, same turns", o.beforeCompaction.floor, ""),
      dist("A, turns that compacted", o.afterCompaction.runtime, x(o.afterCompaction.ratio)),
      dist("B, same turns", o.afterCompaction.floor, ""),
    ]),
    `A adds ${ms(o.runtime.median - o.floor.median)} ms/turn (median); p95 ratio A/B ${
      x(o.p95Ratio)
    }; A/C (beyond the calls it chose to make) ${x(o.ratioWithSummaries)}; ` +
    `summary calls per round ${o.summaryCallsPerRound}; per-round A/B ${o.roundRatios.map(x).join(" ")}`,
    ...workLines(report),
    "",
  ];
}

function workLines(report: BenchReport): string[] {
  const w = report.work;
  if (w === undefined) return [];
  const us = (value: number) => value.toFixed(0);
  return [
    "",
    `1b. The runtime's own work per turn — the same turns with the model answered inside the process (no ` +
    `socket), its ${us(w.stubMedianUs)} µs per turn taken out; ${w.rounds} rounds × ${w.turnsPerRound} turns`,
    table(["turns", "count", "median µs", "p95 µs"], [
      ["all", w.all.count, us(w.all.median), us(w.all.p95)],
      [
        "before compaction is due",
        w.beforeCompaction.count,
        us(w.beforeCompaction.median),
        us(w.beforeCompaction.p95),
      ],
      [
        "that compacted (one summary call each)",
        w.compacting.count,
        us(w.compacting.median),
        us(w.compacting.p95),
      ],
    ]),
  ];
}

function growthSection(report: BenchReport): string[] {
  const g = report.growth;
  if (g === undefined) return [];
  return [
    `2. Growth — one session of ${g.turns} turns, default thresholds`,
    table(["measure", "value"], [
      [`median ms/turn, turns 1–${g.window}`, ms(g.firstMedianMs)],
      [`  of which turns before any compaction`, ms(g.beforeCompactionMedianMs)],
      [`  of which compacting turns`, ms(g.firstWindowCompactingMedianMs)],
      [`median ms/turn, last ${g.window} turns`, ms(g.lastMedianMs)],
      ["ratio last / first", x(g.ratio)],
      ["ratio last / turns before any compaction", x(g.ratioVsBeforeCompaction)],
      [
        `reference turns 1–10 interleaved: median in first / last window`,
        `${ms(g.referenceFirstMedianMs)} / ${ms(g.referenceLastMedianMs)}`,
      ],
      ["last window / reference turns of the same time", x(g.lastVsReference)],
      ["ratio last / first, corrected for drift", x(g.driftCorrectedRatio)],
      ["request bytes at turn 1 (tool call, answer)", g.requestBytesFirstTurn.join(", ")],
      [`request bytes at turn ${g.turns}`, g.requestBytesLastTurn.join(", ")],
      ["summary calls (provider count)", g.summaryCalls],
      ["compactions ok / failed (trace)", `${g.compactions.ok} / ${g.compactions.failed}`],
      ["estimated tokens, last request / largest", `${g.lastRequestTokens} / ${g.maxRequestTokens}`],
      ["under AGENT_MAX_CTX_TOKENS", `${g.underBudget ? "yes" : "NO"} (budget ${g.maxCtxTokens})`],
      ["database + WAL bytes, trace bytes", `${g.dbBytes}, ${g.traceBytes}`],
    ]),
    "",
  ];
}

function httpSection(report: BenchReport): string[] {
  const h = report.http;
  if (h === undefined) return [];
  const header = [
    "clients",
    "sessions",
    "turns",
    "turns/s",
    "ideal/s",
    "efficiency",
    "floor/s",
    "vs floor",
    "p50 ms",
    "p99 ms",
    "errors",
    "429s",
    "gave up",
    "summaries",
    "CPU ms/turn srv+prov+bench",
    "machine busy",
  ];
  const rows = h.rows.map((r) => [
    r.clients,
    r.sessions,
    r.turns,
    ms(r.turnsPerSecond),
    ms(r.idealTurnsPerSecond),
    pct(r.efficiency),
    r.floor === null ? "" : ms(r.floor.turnsPerSecond),
    r.efficiencyVsFloor === null ? "" : pct(r.efficiencyVsFloor),
    ms(r.latency.median),
    ms(r.latency.p99),
    r.errors,
    r.status429,
    r.gaveUp,
    r.summaryCalls,
    `${r.cpuMsPerTurn.server.toFixed(2)} + ${r.cpuMsPerTurn.provider.toFixed(2)} + ${
      r.cpuMsPerTurn.bench.toFixed(2)
    }`,
    pct(r.machineBusy),
  ]);
  const shared = h.rows.find((r) => r.sessions === "one");
  const notes = shared === undefined ? [] : [
    `one session: ideal counting its summary calls ${ms(shared.idealWithSummaries ?? NaN)}/s ` +
    `(${pct(shared.turnsPerSecond / (shared.idealWithSummaries ?? NaN))} of it); per-turn latency with ` +
    `429 waits p50 ${ms(shared.turnLatency.median)} ms, p99 ${ms(shared.turnLatency.p99)} ms`,
  ];
  return [
    `3. HTTP — serve as a subprocess, provider latency ${h.latencyMs} ms (ideal per turn ${
      2 * h.latencyMs
    } ms), ` +
    `${h.turnsPerClient} sequential turns per client`,
    table(header, rows),
    "floor/s: the same clients doing a turn's two requests straight to the provider with plain fetch, " +
    "run right after",
    ...notes,
    `serve start ${ms(h.startupMs)} ms; RSS after the load ${ms(h.rssAfterLoadMiB)} MiB; ` +
    `exit code after SIGTERM ${h.exitCode}`,
    "",
  ];
}

function memorySection(report: BenchReport): string[] {
  const m = report.memory;
  const s = report.startup;
  const lines: string[] = [];
  if (m !== undefined) {
    lines.push(
      `4a. Memory — VmRSS of the serve process, ${m.sessions} sessions created through it ` +
        "(0-latency provider)",
      table(["state", "RSS MiB"], [
        ["after start, empty database", ms(m.idleRssMiB)],
        [`after creating ${m.sessions} sessions`, ms(m.afterCreateRssMiB)],
        [`after GET /v1/sessions (${m.listed} listed)`, ms(m.afterListRssMiB)],
        ["peak (VmHWM)", ms(m.peakRssMiB)],
        [`restarted on that database`, ms(m.restartRssMiB)],
        ["restarted, after one turn", ms(m.restartAfterTurnRssMiB)],
      ]),
      `database + WAL ${m.dbBytes} bytes; errors ${m.errors}; exit codes ${m.exitCodes.join(", ")}`,
      "",
    );
  }
  if (s !== undefined) {
    lines.push(
      `4b. Start-up — median of ${s.repeats} after one unmeasured start`,
      table(["measure", "median ms", "runs ms", "first run ms"], [
        [
          "serve: spawn → first 200 /healthz",
          ms(s.serveMedianMs),
          s.serveMs.map(ms).join(" "),
          ms(s.serveFirstMs),
        ],
        [
          "chat (piped): spawn → first answer line",
          ms(s.chatMedianMs),
          s.chatMs.map(ms).join(" "),
          ms(s.chatFirstMs),
        ],
        ["deno task adds: task_flags.ts spawn → exit", ms(s.taskFlagsMedianMs), "", ""],
      ]),
      `chat answered 84 and exited 0 every time: ${s.chatOk ? "yes" : "NO"}`,
      "",
    );
  }
  return lines;
}

function targetRows(report: BenchReport): string[][] {
  const { overhead, growth, http, memory, targets } = report;
  const row = (clients: number) => http?.rows.find((r) => r.sessions === "distinct" && r.clients === clients);
  const [r16, r64] = [row(16), row(64)];
  const none = "";
  return [
    [
      "per-turn ≤ 1.3× the floor (median)",
      overhead === undefined
        ? none
        : `${x(overhead.ratio)}; ${x(overhead.ratioWithSummaries)} counting summary calls`,
      verdict(targets.overhead),
    ],
    [
      "last-50 ≤ 1.2× first-50 (growth)",
      growth === undefined ? none : x(growth.ratio),
      verdict(targets.growth),
    ],
    [
      "  the same, corrected for drift by interleaved reference turns",
      growth === undefined ? none : x(growth.driftCorrectedRatio),
      verdict(targets.growthDriftCorrected),
    ],
    [
      "HTTP ≥ 90% of ideal at 16, ≥ 70% at 64, zero errors",
      r16 === undefined || r64 === undefined ? none : `${pct(r16.efficiency)}, ${pct(r64.efficiency)}`,
      verdict(targets.http),
    ],
    [
      "serve RSS < 150 MB with 1,000 sessions",
      memory === undefined
        ? none
        : `${(Math.max(memory.afterCreateRssMiB, memory.afterListRssMiB) * 1.048576).toFixed(1)} MB`,
      verdict(targets.memory),
    ],
  ];
}

/** The report as text: a header, one table per section that ran, the targets. */
export function formatReport(report: BenchReport): string {
  const { machine } = report;
  return [
    `mini-runtime-agent bench (${report.mode}) — Deno ${machine.deno}, V8 ${machine.v8}, ${machine.os}, ` +
    `${machine.cores} cores, ${report.seconds.toFixed(1)} s`,
    "",
    ...overheadSection(report),
    ...growthSection(report),
    ...httpSection(report),
    ...memorySection(report),
    "Targets",
    table(["target", "measured", "result"], targetRows(report)),
  ].join("\n");
}
