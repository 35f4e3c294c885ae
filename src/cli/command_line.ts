/**
 * The program's command line as `parseArgs` reads it, in one place: for `main.ts`, and for the launcher that
 * grants a task the files its command line names before the program starts.
 * @module
 */
import { resolve } from "node:path";
import { parseArgs } from "node:util";

/** The options of the command line (a subcommand and words are positionals). */
export const COMMAND_LINE_OPTIONS = {
  session: { type: "string" },
  continue: { type: "boolean", short: "c", default: false },
  verbose: { type: "boolean", short: "v", default: false },
  demo: { type: "boolean", default: false },
  user: { type: "string", default: "local" },
  "no-color": { type: "boolean", default: false },
  schema: { type: "string" },
  help: { type: "boolean", short: "h", default: false },
} as const;

/**
 * The files `args` name for the program to read, as absolute paths (`--schema FILE`; `-`, stdin, is none):
 * each is granted alone, nothing wider. Lenient: a command line the program will refuse names no file.
 */
export function namedFiles(args: readonly string[]): string[] {
  const { values } = parseArgs({
    args: [...args],
    options: COMMAND_LINE_OPTIONS,
    allowPositionals: true,
    strict: false,
  });
  const schema = values.schema;
  return typeof schema === "string" && schema !== "-" && schema !== "" ? [resolve(schema)] : [];
}
