/**
 * Fails when the project's own modules import each other in a circle. Reads the module graph `deno info
 * --json` reports for each entry file (code and type-only imports alike) and prints one line per cycle,
 * `src/a.ts -> src/b.ts -> src/a.ts`, paths relative to the working directory; exits 1 when there is one,
 * 0 printing nothing when there is none, 2 when the graph cannot be read (a module of the project
 * missing or broken). Modules outside the working
 * directory (npm, remote) are not followed.
 *
 * `deno run --allow-run=deno --allow-read scripts/check_cycles.ts [entry.ts ...]`; without arguments the
 * entries are `src/main.ts` and every `scripts/*.ts` not starting with `_`.
 * @module
 */
import { relative, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

/** One module of `deno info --json`, as far as the graph needs it. */
interface InfoModule {
  specifier: string;
  /** Why the module could not be loaded (not found, not parsed). */
  error?: string;
  dependencies?: { code?: { specifier?: string }; type?: { specifier?: string } }[];
}

/** The default entries: the program and the scripts a task runs. */
function defaultEntries(): string[] {
  const scripts = [...Deno.readDirSync("scripts")]
    .filter((entry) => entry.isFile && entry.name.endsWith(".ts") && !entry.name.startsWith("_"))
    .map((entry) => `scripts/${entry.name}`)
    .sort();
  return ["src/main.ts", ...scripts];
}

/**
 * The graph of `entry` as `deno info --json` reports it; throws saying why it could not be read, also when
 * one of the modules under `root` could not be loaded (a graph with a hole proves nothing).
 */
async function readGraph(entry: string, root: string): Promise<InfoModule[]> {
  const output = await new Deno.Command("deno", { args: ["info", "--json", entry], stdin: "null" }).output();
  const cannot = `Cannot read the module graph of ${relative(Deno.cwd(), entry)}`;
  if (!output.success) {
    const reason = new TextDecoder().decode(output.stderr).trim().split("\n")[0];
    throw new Error(`${cannot}: deno info exited ${output.code}: ${reason}`);
  }
  const { modules } = JSON.parse(new TextDecoder().decode(output.stdout)) as { modules: InfoModule[] };
  const broken = modules.find((module) => module.specifier.startsWith(root) && module.error !== undefined);
  if (broken !== undefined) throw new Error(`${cannot}: ${broken.error}`);
  return modules;
}

/** Each module under `root` with the modules under `root` it imports (code or type), sorted. */
function ownImports(modules: readonly InfoModule[], root: string): Map<string, string[]> {
  const own = (specifier: string | undefined) => specifier?.startsWith(root) ?? false;
  const edges = new Map<string, string[]>();
  for (const module of modules) {
    if (!own(module.specifier)) continue;
    const targets = new Set<string>();
    for (const { code, type } of module.dependencies ?? []) {
      for (const specifier of [code?.specifier, type?.specifier]) if (own(specifier)) targets.add(specifier!);
    }
    edges.set(module.specifier, [...targets].sort());
  }
  return edges;
}

/**
 * One cycle for every import that leads back to a module still being followed (a depth-first search in
 * sorted order, so the output is stable): every circle of imports shows up in at least one of them.
 */
export function findCycles(edges: ReadonlyMap<string, readonly string[]>): string[][] {
  const cycles: string[][] = [];
  const done = new Set<string>();
  const path: string[] = [];
  const onPath = new Set<string>();
  const visit = (module: string) => {
    path.push(module);
    onPath.add(module);
    for (const target of edges.get(module) ?? []) {
      if (onPath.has(target)) cycles.push([...path.slice(path.indexOf(target)), target]);
      else if (!done.has(target)) visit(target);
    }
    onPath.delete(module);
    path.pop();
    done.add(module);
  };
  for (const module of [...edges.keys()].sort()) if (!done.has(module)) visit(module);
  return cycles;
}

if (import.meta.main) {
  const cwd = Deno.cwd();
  const root = pathToFileURL(cwd).href + "/";
  const edges = new Map<string, string[]>();
  try {
    const entries = Deno.args.length > 0 ? Deno.args : defaultEntries();
    for (const entry of entries) {
      for (const [module, targets] of ownImports(await readGraph(resolve(entry), root), root)) {
        edges.set(module, targets);
      }
    }
  } catch (error) {
    console.error(error instanceof Error ? error.message : String(error));
    Deno.exit(2);
  }
  const cycles = findCycles(edges);
  const shown = (specifier: string) => relative(cwd, fileURLToPath(specifier));
  for (const cycle of cycles) console.log(cycle.map(shown).join(" -> "));
  if (cycles.length > 0) Deno.exit(1);
}
