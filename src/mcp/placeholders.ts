/**
 * expandPlaceholders(): the `${…}` of an MCP entry's strings as VS Code and Claude Code write them: `${VAR}`
 * and `${env:VAR}` from the environment, Claude Code's `${VAR:-default}` (the default when VAR is unset or
 * empty), `${workspaceFolder}` as the working folder. `${user}` is left as it is: a user-scoped server fills it
 * per user (`user_servers.ts`). Anything else (VS Code's `${input:…}` prompts, `${command:…}`) is a problem
 * naming the placeholder. A problem names variables, never their values: those may be tokens.
 * @module
 */

/** Options of {@linkcode expandPlaceholders}. */
export interface PlaceholderOptions {
  /**
   * Where `${VAR}` is read; a `get` that throws `Deno.errors.NotCapable` is a variable this process may not
   * read.
   * @default {Deno.env}
   */
  env?: Pick<Deno.Env, "get">;
  /** What `${workspaceFolder}` stands for: the folder the runtime was started in. @default {Deno.cwd()} */
  workspaceFolder?: string;
}

/** The text with its placeholders filled, the variables read, and the values they gave; or why not. */
export type Expansion =
  | { ok: true; text: string; variables: readonly string[]; values: readonly string[] }
  | { ok: false; problem: string };

const PLACEHOLDER = /\$\{([^}]*)\}/g;
/** `NAME`, `env:NAME`, either with `:-default`. */
const VARIABLE = /^(?:env:)?([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?$/s;

/**
 * `text` with each placeholder filled; `where` names the field in a problem (`"env.TOKEN"`, `"args[1]"`).
 * Never throws: an unset variable without a default, one this process may not read, an `${input:…}` or an
 * unknown placeholder is an outcome with one line naming it.
 */
export function expandPlaceholders(text: string, where: string, options: PlaceholderOptions = {}): Expansion {
  const { env = Deno.env, workspaceFolder } = options;
  const variables: string[] = [];
  const values: string[] = [];
  let problem = null as string | null;
  const expanded = text.replace(PLACEHOLDER, (whole, inner: string) => {
    if (problem !== null) return whole;
    if (inner === "user") return whole;
    if (inner === "workspaceFolder") return workspaceFolder ?? Deno.cwd();
    if (inner.startsWith("input:")) {
      problem = `"${where}" asks for the input "${inner.slice(6)}", which only VS Code prompts for: ` +
        `put the value in a variable and write \${env:NAME} instead`;
      return whole;
    }
    const variable = VARIABLE.exec(inner);
    if (variable === null) {
      problem = `"${where}" holds \${${inner.slice(0, 40)}}, which is not expanded here ` +
        "(known: ${VAR}, ${env:VAR}, ${VAR:-default}, ${workspaceFolder}, ${user})";
      return whole;
    }
    const [, name, fallback] = variable;
    variables.push(name);
    let value: string | undefined;
    try {
      value = env.get(name);
    } catch {
      // Deno.errors.NotCapable: not in the --allow-env list.
      problem = `"${where}" needs the variable ${name}, which this process may not read ` +
        `(grant it with --allow-env=${name})`;
      return whole;
    }
    if (fallback !== undefined && (value === undefined || value === "")) return fallback;
    if (value === undefined) {
      problem = `"${where}" needs the variable ${name}, which is not set ` +
        `(set it, or give a default: \${${name}:-default})`;
      return whole;
    }
    if (value !== "") values.push(value);
    return value;
  });
  return problem === null ? { ok: true, text: expanded, variables, values } : { ok: false, problem };
}
