/**
 * The acceptance demo (`deno task demo`): five phases against the real loop, store, tools, compaction and
 * trace, each judged PASS/FAIL with its reason; offline with the DemoModel unless `--live`.
 * @module
 */
import { join } from "node:path";
import { parseArgs } from "node:util";
import { createStyle, renderEvent } from "../cli/render.ts";
import { type Config, loadConfig, readEnvironment, requireApiKey } from "../config.ts";
import { ConfigError, errorMessage } from "../errors.ts";
import type { LLM } from "../llm/llm.ts";
import { createLlmFromConfig, type RetryInfo } from "../llm/client.ts";
import { ENV_VARIABLES, llmNetHost } from "../permissions.ts";
import { SqliteStore } from "../store/sqlite.ts";
import { createLlmSummarizer, deterministicSummarizer, type Summarizer } from "../memory/summarizer.ts";
import { createBuiltinTools } from "../tools/builtin.ts";
import { JsonlTracer } from "../trace/trace.ts";
import { BackgroundCompactions } from "../session/background.ts";
import type { Message } from "../types.ts";
import type { RunEvent, TracedEvent } from "../events.ts";
import { DemoModel } from "./model.ts";
import { type Demo, DEMO_RAW_TURNS, PHASES, recordRequests, type Verdict } from "./_phases.ts";

/** Options of {@linkcode runDemo}. */
export interface DemoOptions {
  /** Ask the configured provider (OPENAI_* variables) instead of the offline model. @default {false} */
  live?: boolean;
  /** Receives each output line. @default {(line) => console.log(line)} */
  out?: (line: string) => void;
  /** ANSI styling in the output. @default {false} */
  color?: boolean;
  /** Keep the temporary directory (database and trace) and print its path. @default {false} */
  keep?: boolean;
  /** The phases to run, by number (1–5). @default {[1, 2, 3, 4, 5]} */
  phases?: readonly number[];
  /** The model the turns use. @default {new DemoModel(), or the configured provider's client with live} */
  llm?: LLM;
  /** The compaction summarizer. @default {deterministicSummarizer, or createLlmSummarizer(llm) with live} */
  summarizer?: Summarizer;
}

/** How many phases passed and failed. */
export type DemoResult = { passed: number; failed: number };

/**
 * The live provider's config and client. Fails with `ConfigError` for a bad or missing setting and with
 * `Deno.errors.NotCapable` naming the exact `--allow-env` or `--allow-net` flag that is missing.
 */
function liveModel(log: (reason: string) => void): { config: Readonly<Config>; llm: LLM } {
  const granted = (variable: string) =>
    Deno.permissions.querySync({ name: "env", variable }).state === "granted";
  if (!ENV_VARIABLES.every(granted)) {
    throw new Deno.errors.NotCapable(
      `Cannot run the live demo: missing permission --allow-env=${ENV_VARIABLES.join(",")}`,
    );
  }
  const config = loadConfig(readEnvironment(ENV_VARIABLES));
  requireApiKey(config);
  const host = llmNetHost(config.baseUrl);
  if (Deno.permissions.querySync({ name: "net", host }).state !== "granted") {
    throw new Deno.errors.NotCapable(`Cannot run the live demo: missing permission --allow-net=${host}`);
  }
  const onRetry = (info: RetryInfo) => log(`retry ${info.attempt} in ${info.delayMs} ms: ${info.reason}`);
  return { config, llm: createLlmFromConfig(config, { onRetry }) };
}

/** The demo's first line: offline or live, and which model and summarizer the turns use. */
function describeSetup(options: DemoOptions, config: Readonly<Config>): string {
  const live = options.live ?? false;
  const remote = `${config.model} at ${new URL(config.baseUrl).host}`;
  const model = options.llm ? "an injected model" : live ? remote : "rule-based demo model";
  const ownSummarizer = live ? "LLM summarizer" : "deterministic summarizer";
  const summarizer = options.summarizer ? "an injected summarizer" : ownSummarizer;
  return `${live ? "live" : "offline"}: ${model}, ${summarizer}`;
}

/**
 * Runs the demo's phases in a fresh temporary directory (removed at the end unless `keep`) and resolves to
 * how many passed and failed. A failing or throwing phase is counted as failed, never thrown. Rejects only
 * before any phase runs: with `live`, `ConfigError` for the configuration and `Deno.errors.NotCapable` for a
 * missing `--allow-env`/`--allow-net`; and for a missing read/write permission on the temp dir or the docs.
 */
export async function runDemo(options: DemoOptions = {}): Promise<DemoResult> {
  const { live = false, out = (line: string) => console.log(line), color = false, keep = false } = options;
  const { phases = PHASES.map((_, i) => i + 1) } = options;
  const unknown = phases.filter((n) => !Number.isInteger(n) || n < 1 || n > PHASES.length);
  if (unknown.length > 0) {
    throw new RangeError(`Cannot run the demo: no phase ${unknown.join(", ")} (1-${PHASES.length})`);
  }
  const style = createStyle(color);
  const provider = live && options.llm === undefined
    ? liveModel((reason) => out(style.dim(`    … ${reason}`)))
    : {
      config: live ? loadConfig(readEnvironment(ENV_VARIABLES)) : loadConfig({}),
      llm: options.llm ?? new DemoModel(),
    };
  const { config } = provider;
  const summarizer = options.summarizer ??
    (live ? createLlmSummarizer(provider.llm) : deterministicSummarizer);

  const dir = Deno.makeTempDirSync({ prefix: "mra-demo-" });
  const tracePath = join(dir, "trace.jsonl");
  const store = new SqliteStore(join(dir, "sessions.db"));
  const { traceMaxPayloadChars: maxPayloadChars, apiKey } = config;
  const tracer = new JsonlTracer(tracePath, { maxPayloadChars, secrets: [apiKey] });
  const [events, requests]: [TracedEvent[], Message[][]] = [[], []];
  const emit = (event: RunEvent) => {
    tracer.write(event);
    events.push(event);
    const line = renderEvent(event, style);
    if (line !== null) out(line);
  };
  // The demo waits for each background compaction after its turn, so its output never interleaves.
  const compactions = new BackgroundCompactions(emit);
  let passed = 0;
  try {
    const { maxToolIters: maxSteps, maxCtxTokens, userMemoryItems: items, userMemoryRecall: recall } = config;
    const userMemory = config.userMemory ? { items, recall } : null;
    const memoryItems = userMemory?.items ?? null;
    const [llm, tools] = [recordRequests(provider.llm, requests), createBuiltinTools(store, { memoryItems })];
    const agent = {
      llm,
      tools,
      maxSteps,
      summarizer,
      maxRawTurns: DEMO_RAW_TURNS,
      maxCtxTokens,
      userMemory,
      compactions,
    };
    const demo: Demo = { store, out, style, tracePath, events, requests, agent, run: { emit, store } };
    out(style.bold(`mini-runtime-agent acceptance demo (${describeSetup(options, config)})`));
    out(style.dim(`database ${join(dir, "sessions.db")}, trace ${tracePath}`));
    for (const n of [...new Set(phases)].sort((a, b) => a - b)) {
      const phase = PHASES[n - 1];
      out("");
      out(style.bold(`── Phase ${n}/${PHASES.length} · ${phase.name}`));
      const result = await Promise.try(() => phase.run(demo)).catch((error): Verdict => {
        return { ok: false, reason: `the phase threw: ${errorMessage(error)}` };
      });
      if (result.ok) passed++;
      const label = result.ok ? style.bold("PASS") : style.red(style.bold("FAIL"));
      out(`${label}  Phase ${n} · ${phase.name}: ${result.reason}`);
    }
  } finally {
    await compactions.close();
    tracer.close();
    await store.close();
    if (keep) out(style.dim(`kept ${dir}`));
    else Deno.removeSync(dir, { recursive: true });
  }
  const total = new Set(phases).size;
  out("");
  out(style.bold(`${passed}/${total} phases passed`));
  return { passed, failed: total - passed };
}

const HELP = `mini-runtime-agent acceptance demo: five phases against the real loop, store, tools, compaction
and trace, each printed as it happens and judged PASS or FAIL with the reason.

Usage:
  deno task demo [--keep]        offline: a rule-based model that reads its requests, no network
  deno task demo --live [--keep] the configured provider (OPENAI_API_KEY, OPENAI_BASE_URL, MODEL)

Phases:
  1 Calculator loop            the model calls calculator; the answer holds the tool's result
  2 Two windows                two sessions of one user share no todo, fact, history or turn count
  3 Follow-up after compaction an early fact survives compaction only in the [RUNTIME CONTEXT] summary
  4 Memory across windows      a fact compacted in window 1 is recalled in the same user's fresh window 3,
                               not in another user's
  5 Trace                      the JSONL trace of all runs, as a timeline, and its shape checked

Options:
  --live       use the configured provider instead of the offline model (needs --allow-env and
               --allow-net=<the provider's host:port>; the database and trace stay temporary)
  --keep       keep the temporary database and trace, and print where they are
  -h, --help   show this help

Exit codes: 0 every phase passed; 1 a phase failed; 2 bad usage, configuration or permissions.`;

/** Runs the demo for the command line `args` and resolves to the exit code. */
export async function main(args: string[]): Promise<number> {
  let values;
  try {
    const flag = { type: "boolean", default: false } as const;
    ({ values } = parseArgs({ args, options: { live: flag, keep: flag, help: { ...flag, short: "h" } } }));
  } catch (error) {
    console.error(`${(error as Error).message}\nRun with --help for usage.`);
    return 2;
  }
  if (values.help) return console.log(HELP), 0;
  try {
    const color = Deno.stdout.isTerminal() && !Deno.noColor;
    const { failed } = await runDemo({ live: values.live, keep: values.keep, color });
    return failed === 0 ? 0 : 1;
  } catch (error) {
    // A missing read permission on the docs arrives wrapped by loadCorpus, with NotCapable as its cause.
    const denied = error instanceof Deno.errors.NotCapable ||
      (error instanceof Error && error.cause instanceof Deno.errors.NotCapable);
    if (error instanceof ConfigError || denied) {
      console.error((error as Error).message);
      return 2;
    }
    throw error;
  }
}
