// encode.js — the JavaScript reference for gcore's tokenizer tests and
// bench: the transformers.js port in @lenml/tokenizer-llama{2,3}.
//   node encode.js llama3 < texts.json       -> [[ids...], ...] (no BOS/EOS added)
//   node encode.js llama3 --bench FILE [REPS] -> {"bytes", "seconds" (best encode of
//                                               REPS, fresh tokenizer each), "cpu_seconds"
//                                               (process CPU time, all threads), "tokens", "hash"}
// texts.json is a JSON list of strings.
"use strict";
const fs = require("fs");
const which = process.argv[2];
if (which !== "llama2" && which !== "llama3") {
  process.stderr.write("usage: node encode.js llama2|llama3 [--bench FILE [REPS]] < texts.json\n");
  process.exit(2);
}
const pkg = require(`@lenml/tokenizer-${which}`);
const encoder = (tok) => (s) => tok.encode(s, { add_special_tokens: false });

function fnv(ids) { // FNV-1a over the ids, as bench/tok_bench.c
  let h = 2166136261;
  for (const id of ids) h = Math.imul(h ^ id, 16777619) >>> 0;
  return h >>> 0;
}

if (process.argv[3] === "--bench") {
  const text = fs.readFileSync(process.argv[4], "utf8");
  const reps = Number(process.argv[5] || 3);
  let best = Infinity, bestCpu = Infinity, ids = [];
  for (let r = 0; r < reps; r++) {
    const encode = encoder(pkg.fromPreTrained());
    const t0 = process.hrtime.bigint(), c0 = process.cpuUsage();
    ids = encode(text);
    const c = process.cpuUsage(c0);
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
    bestCpu = Math.min(bestCpu, (c.user + c.system) / 1e6);
  }
  process.stdout.write(JSON.stringify({ bytes: Buffer.byteLength(text, "utf8"), seconds: best, cpu_seconds: bestCpu,
                                        tokens: ids.length, hash: fnv(ids) }) + "\n");
} else {
  const encode = encoder(pkg.fromPreTrained());
  const texts = JSON.parse(fs.readFileSync(0, "utf8"));
  process.stdout.write(JSON.stringify(texts.map(encode)) + "\n");
}
