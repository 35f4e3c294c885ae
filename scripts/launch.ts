/**
 * Runs chat under the least-privilege flags of its settings and of its own command line: `deno task chat
 * ARGS` is `deno run … scripts/launch.ts chat ARGS`, which derives the flags as `task_flags.ts` does, plus a
 * read grant for exactly each file ARGS name (`--schema FILE`), then runs `src/main.ts chat ARGS` under them
 * and exits as it does. A task string cannot hand its arguments to `task_flags.ts`; this process can. It
 * waits for the program: a terminal's Ctrl-C reaches both, and the program decides; SIGTERM and SIGHUP sent
 * here are passed on.
 * @module
 */
import { tmpdir } from "node:os";
import { fileURLToPath } from "node:url";
import { ENV_VARIABLES, taskPermissionFlags } from "../src/permissions.ts";
import { readEnvironment } from "../src/config.ts";
import { TELEMETRY_VARIABLES } from "../src/telemetry.ts";
import { namedFiles } from "../src/cli/command_line.ts";

/** The program's heap settings, as every task runs it. */
const V8_FLAGS = "--v8-flags=--max-semi-space-size=4,--heap-growing-percent=50";

const [task, ...args] = Deno.args;
if (task !== "chat") {
  console.error(`Cannot launch "${task ?? ""}": only chat takes files on its command line`);
  Deno.exit(2);
}
const env = readEnvironment([...ENV_VARIABLES, ...TELEMETRY_VARIABLES]);
const flags = taskPermissionFlags(env, { task, tempDir: tmpdir(), files: namedFiles(args) });
const program = fileURLToPath(new URL("../src/main.ts", import.meta.url));
// By name, as the task string runs it: the grant is --allow-run=deno.
const child = new Deno.Command("deno", {
  args: ["run", "--no-prompt", V8_FLAGS, ...flags, program, task, ...args],
  stdin: "inherit",
  stdout: "inherit",
  stderr: "inherit",
}).spawn();
Deno.addSignalListener("SIGINT", () => {});
for (const signal of ["SIGTERM", "SIGHUP"] as const) {
  Deno.addSignalListener(signal, () => child.kill(signal));
}
Deno.exit((await child.status).code);
