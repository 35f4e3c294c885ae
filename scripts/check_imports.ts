/**
 * Fails when the project's own modules import each other in a circle, or against the order of layers written
 * in `scripts/layers.json` (when the working directory has one). Reads the module graph `deno info --json`
 * reports for each entry file (code and type-only imports alike) and prints one line per cycle,
 * `src/a.ts -> src/b.ts -> src/a.ts`, and one per import against the layers, `src/store/x.ts -> src/web/y.js:
 * store imports page, a layer above it`, paths relative to the working directory; exits 1 when there is
 * either, 0 printing nothing when there is none, 2 when the graph or the layers cannot be read (a module of
 * the project missing or broken, a module of `src/` in no layer). Modules outside the working directory (npm,
 * remote) are not followed.
 *
 * The layers, lowest first, each name units: a folder (`src/llm`: every module under it) or a file. A module
 * may import its own unit, any unit of a lower layer, and another unit of its own layer unless the layer is
 * `apart` (surfaces never import each other). Scripts and tests are above every layer and are not checked.
 *
 * `deno run --allow-run=deno --allow-read scripts/check_imports.ts [entry.ts ...]`; without arguments the
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

/** One layer of `scripts/layers.json`. */
export interface Layer {
  name: string;
  /** Folders and files, relative to the project: `src/llm`, `src/config.ts`. */
  units: string[];
  /** Its units may not import each other. @default {false} */
  apart?: boolean;
}

/** Where a module sits: its unit and the index of its layer; null when no unit holds it. */
function placeOf(path: string, layers: readonly Layer[]): { unit: string; layer: number } | null {
  let found: { unit: string; layer: number } | null = null;
  for (const [layer, { units }] of layers.entries()) {
    for (const unit of units) {
      const holds = path === unit || path.startsWith(`${unit}/`);
      if (holds && (found === null || unit.length > found.unit.length)) found = { unit, layer };
    }
  }
  return found;
}

/**
 * Every import against `layers`, as `from -> to: why` (paths relative to the project, sorted); throws naming
 * a module under `src/` that no layer holds, so a new folder must be given its place.
 */
export function layerViolations(
  edges: ReadonlyMap<string, readonly string[]>,
  layers: readonly Layer[],
  shown: (specifier: string) => string,
): string[] {
  const lines: string[] = [];
  const place = (path: string) => {
    const found = placeOf(path, layers);
    if (found === null && path.startsWith("src/")) {
      throw new Error(`${path} is in no layer of scripts/layers.json: give its folder a place in the order`);
    }
    return found;
  };
  for (const [module, targets] of [...edges].sort(([a], [b]) => (a < b ? -1 : 1))) {
    const from = place(shown(module));
    if (from === null) continue;
    for (const target of targets) {
      const to = place(shown(target));
      if (to === null || to.unit === from.unit || to.layer < from.layer) continue;
      const [a, b] = [layers[from.layer], layers[to.layer]];
      if (to.layer === from.layer && !a.apart) continue;
      const why = to.layer === from.layer
        ? `${from.unit} imports ${to.unit}, another unit of ${a.name}, whose units stay apart`
        : `${a.name} imports ${b.name}, a layer above it`;
      lines.push(`${shown(module)} -> ${shown(target)}: ${why}`);
    }
  }
  return lines;
}

/** The layers of `scripts/layers.json` under `cwd`, or null when there is none. */
function readLayers(cwd: string): Layer[] | null {
  let text: string;
  try {
    text = Deno.readTextFileSync(`${cwd}/scripts/layers.json`);
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return null;
    throw error;
  }
  const { layers } = JSON.parse(text) as { layers?: unknown };
  const valid = Array.isArray(layers) &&
    layers.every((layer) =>
      typeof layer?.name === "string" && Array.isArray(layer.units) &&
      layer.units.every((unit: unknown) => typeof unit === "string")
    );
  if (!valid) throw new Error("scripts/layers.json: expected {layers: [{name, units: [path, ...], apart?}]}");
  return layers as Layer[];
}

if (import.meta.main) {
  const cwd = Deno.cwd();
  const root = pathToFileURL(cwd).href + "/";
  const edges = new Map<string, string[]>();
  let layers: Layer[] | null;
  try {
    layers = readLayers(cwd);
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
  let against: string[] = [];
  try {
    against = layers === null ? [] : layerViolations(edges, layers, shown);
  } catch (error) {
    console.error(error instanceof Error ? error.message : String(error));
    Deno.exit(2);
  }
  for (const line of against) console.log(line);
  if (cycles.length > 0 || against.length > 0) Deno.exit(1);
}
