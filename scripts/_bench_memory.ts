/**
 * The bench's memory section: what recalling a user's memory adds to a turn, with many users each holding the
 * item limit in one SQLite database. The runtime's own work per turn (the model answered in-process, as in
 * 1b) with memory on, with recall alone off (`remember` and `forget` still offered) and with memory off (no
 * recall, no `remember` and `forget`), turn by turn on one runtime, and the recall query alone.
 * @module
 */
import { distribution, makeTempDir, median } from "./_bench_process.ts";
import { answeredTurn, inProcessModel, openBenchRuntime, timed, turnMessage } from "./_bench_turns.ts";
import { createBuiltinTools } from "../src/tools/builtin.ts";

/** Words the generated items are made of: common enough that recall finds some for every question. */
const WORDS = ("apple river stone garden window coffee teacher project meeting budget travel music " +
  "doctor kitchen bicycle market letter camera summer winter morning evening office friend sister " +
  "brother garden holiday invoice report server laptop phone ticket concert museum library bakery " +
  "station harbour mountain forest island").split(" ");

/** A small deterministic generator (mulberry32), so every run stores the same items. */
function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** `count` distinct items as compaction writes them: "User said: …" with a few words and numbers. */
function items(next: () => number, count: number): string[] {
  const pick = () => WORDS[Math.floor(next() * WORDS.length)];
  return Array.from(
    { length: count },
    (_, i) =>
      `User said: my ${pick()} and the ${pick()} near the ${pick()} cost ${1 + Math.floor(next() * 60)} ` +
      `(${i}).`,
  );
}

/** Options of {@linkcode measureRecall}. */
export interface RecallOptions {
  /** Users in the database. @default {1000} */
  users?: number;
  /** Items each holds (AGENT_USER_MEMORY_ITEMS' default). @default {200} */
  itemsPerUser?: number;
  /** Rounds of `turns` turns, each on a fresh session of another user. @default {10} */
  rounds?: number;
  /** @default {100} */
  turns?: number;
}

/**
 * Fills one database with `users` × `itemsPerUser` items, then runs calculator turns of those users with memory
 * on and off alternately (the same messages, the model in-process): the runtime's own work per turn in µs
 * each way, what memory adds (median on − median off) and that as a share of the turn without it; and the
 * recall query alone (`recallMemory`) in µs.
 */
export async function measureRecall(options: RecallOptions = {}) {
  const { users = 1000, itemsPerUser = 200, rounds = 10, turns = 100 } = options;
  await using cleanup = new AsyncDisposableStack();
  const temp = await makeTempDir("mra-bench-recall-");
  cleanup.defer(() => temp.remove());
  const model = inProcessModel();
  const on = openBenchRuntime(temp.path, "http://127.0.0.1:9/v1", { fetch: model.fetch, userMemory: true });
  cleanup.defer(() => on.close());
  const off = { userMemory: null, tools: createBuiltinTools(on.store) };
  // The same tools as with memory on, recall alone off: what the search and the block cost, the tools aside.
  const noRecall = { userMemory: null };

  const next = random(29);
  const fillMs = await timed(async () => {
    for (let u = 0; u < users; u++) {
      await on.store.remember(`user-${u}`, { items: items(next, itemsPerUser), limit: itemsPerUser });
    }
  });
  const own = async (work: () => Promise<unknown>) => {
    const before = model.stubMs();
    const elapsed = await timed(work);
    return (elapsed - (model.stubMs() - before)) * 1000;
  };
  const [withMemory, withoutRecall, withoutMemory, query]: number[][] = [[], [], [], []];
  let recalled = 0;
  for (let r = -1; r < rounds; r++) {
    const userId = `user-${Math.floor(next() * users)}`;
    for (let i = 0; i < turns; i++) {
      const a = await own(() => answeredTurn(on, `recall-${r}`, i, { userId }));
      await on.idle();
      const b = await own(() => answeredTurn(on, `plain-${r}`, i, { userId, variant: off }));
      await on.idle();
      const c = await own(() => answeredTurn(on, `tools-${r}`, i, { userId, variant: noRecall }));
      await on.idle();
      on.takeRequests();
      if (r < 0) continue; // the warm-up round
      withMemory.push(a), withoutMemory.push(b), withoutRecall.push(c);
      let found = 0;
      query.push(
        await timed(async () => {
          found = (await on.store.recallMemory(userId, turnMessage(i), on.config.userMemoryRecall)).length;
        }) * 1000,
      );
      recalled += found;
    }
  }
  const costUs = median(withMemory) - median(withoutMemory);
  const recallCostUs = median(withMemory) - median(withoutRecall);
  return {
    users,
    itemsPerUser,
    rounds,
    turnsPerRound: turns,
    fillSeconds: fillMs / 1000,
    dbBytes: fileSize(on.dbPath) + fileSize(`${on.dbPath}-wal`),
    recalledPerQuery: recalled / query.length,
    recallQueryUs: distribution(query),
    turnWithMemoryUs: distribution(withMemory),
    turnWithoutRecallUs: distribution(withoutRecall),
    turnWithoutMemoryUs: distribution(withoutMemory),
    costUs,
    costRatio: costUs / median(withoutMemory),
    /** What recall alone adds: memory on against the same tools with recall off. */
    recallCostUs,
    recallCostRatio: recallCostUs / median(withoutRecall),
  };
}

function fileSize(path: string): number {
  try {
    return Deno.statSync(path).size;
  } catch {
    return 0; // no WAL file left
  }
}

export type RecallResult = Awaited<ReturnType<typeof measureRecall>>;
