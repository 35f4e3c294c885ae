/**
 * Prints the least-privilege `deno run` permission flags for this configuration, for `deno.json` tasks:
 * `deno run --no-prompt $(deno run ... scripts/task_flags.ts chat) src/main.ts chat`. The argument names
 * the task (`chat`, the default, `serve`, `mcp`, `demo` or `compile`).
 * @module
 */
import { tmpdir } from "node:os";
import { ENV_VARIABLES, taskPermissionFlags } from "../src/permissions.ts";
import { readEnvironment } from "../src/config.ts";
import { TELEMETRY_VARIABLES } from "../src/telemetry.ts";

const task = Deno.args[0] ?? "chat";
if (task !== "chat" && task !== "serve" && task !== "mcp" && task !== "demo" && task !== "compile") {
  console.error(`Unknown task "${task}": expected chat, serve, mcp, demo or compile`);
  Deno.exit(2);
}
const env = readEnvironment([...ENV_VARIABLES, ...TELEMETRY_VARIABLES]);
console.log(taskPermissionFlags(env, { task, tempDir: tmpdir() }).join(" "));
