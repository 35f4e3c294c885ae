/**
 * Prints the least-privilege `deno run` permission flags for this configuration, for `deno.json` tasks:
 * `deno run --no-prompt $(deno run ... scripts/task_flags.ts) src/main.ts chat`.
 * @module
 */
import { readEnvironment, taskPermissionFlags } from "../src/permissions.ts";

console.log(taskPermissionFlags(readEnvironment()).join(" "));
