// The peer's side of bench/train/tokenizer_bench/run: npm's gpt-tokenizer@4.0.0 (its r50k_base
// encoding is GPT-2's) encoding one text file RUNS times in this one node process.
//
//   node gpt_tokenizer_bench.mjs TEXT_FILE RUNS IDS_OUT
//
// The file is read and decoded to a string before any timing. Before each run the merge cache is
// cleared, so that every run starts as Kiln's does (`kiln encode` keeps its per-piece cache for
// one call; both keep their vocabulary lookups). Prints one JSON line: node, version, bytes,
// tokens, runs_s (each run's encode time in seconds); writes the ids of the last run to IDS_OUT as
// a JSON array, for the driver to compare with Kiln's.
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { clearMergeCache, encode } from "gpt-tokenizer/encoding/r50k_base";

const [file, runsArg, idsOut] = process.argv.slice(2);
const runs = Number(runsArg);
if (!file || !Number.isInteger(runs) || runs < 1 || !idsOut) {
  console.error("usage: node gpt_tokenizer_bench.mjs TEXT_FILE RUNS IDS_OUT");
  process.exit(2);
}
const bytes = readFileSync(file);
const text = bytes.toString("utf8");
const runsS = [];
let ids = [];
for (let i = 0; i < runs; i++) {
  clearMergeCache();
  const start = process.hrtime.bigint();
  ids = encode(text);
  runsS.push(Number(process.hrtime.bigint() - start) / 1e9);
}
writeFileSync(idsOut, JSON.stringify(ids));
const version = createRequire(import.meta.url)("gpt-tokenizer/package.json").version;
console.log(JSON.stringify({ node: process.version, version, bytes: bytes.length,
                             tokens: ids.length, runs_s: runsS }));
