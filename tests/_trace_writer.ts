/**
 * A process appending to a trace file, for the test of several writers on one path:
 * `deno run tests/_trace_writer.ts <path> <name> lines <n>` writes n events with one tracer and prints n;
 * `… until <stop-file>` writes until that file exists and prints how many it wrote;
 * `… reopen <n>` opens a fresh tracer for each of n events (each open checks the file for a torn line).
 */
import { existsSync } from "node:fs";
import type { RunEvent } from "../src/events.ts";
import { JsonlTracer } from "../src/trace/trace.ts";

const [path, name, mode, arg] = Deno.args;
const event = (n: number): RunEvent => ({
  ts: "2026-01-01T00:00:00.000Z",
  session_id: name,
  user_id: "u",
  run_id: "r",
  turn: 1,
  event: "llm_call",
  step: n,
  // Lines of many lengths, so some cross a page of the file while they are written.
  data: { pad: "x".repeat(200 + (n * 37) % 900) },
} as unknown as RunEvent);

let tracer = new JsonlTracer(path, { warn: (line) => console.error(line) });
let n = 0;
if (mode === "until") {
  while (n % 64 !== 0 || !existsSync(arg)) tracer.write(event(n++));
} else {
  for (; n < Number(arg); n++) {
    if (mode === "reopen") {
      tracer.close();
      tracer = new JsonlTracer(path);
    }
    tracer.write(event(n));
  }
}
tracer.close();
console.log(n);
