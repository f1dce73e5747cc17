// encode.js — the JavaScript reference for gcore's tokenizer tests and
// bench: the transformers.js port in @lenml/tokenizer-llama{2,3}.
//   node encode.js llama3 < texts.json   -> [[ids...], ...] (no BOS/EOS added)
//   node encode.js llama3 --bench FILE   -> {"bytes": N, "seconds": S, "tokens": T}
// texts.json is a JSON list of strings.
"use strict";
const fs = require("fs");
const which = process.argv[2];
if (which !== "llama2" && which !== "llama3") {
  process.stderr.write("usage: node encode.js llama2|llama3 [--bench FILE] < texts.json\n");
  process.exit(2);
}
const tok = require(`@lenml/tokenizer-${which}`).fromPreTrained();
const encode = (s) => tok.encode(s, { add_special_tokens: false });
if (process.argv[3] === "--bench") {
  const text = fs.readFileSync(process.argv[4], "utf8");
  const t0 = process.hrtime.bigint();
  const ids = encode(text);
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  process.stdout.write(JSON.stringify({ bytes: Buffer.byteLength(text, "utf8"), seconds: s, tokens: ids.length }) + "\n");
} else {
  const texts = JSON.parse(fs.readFileSync(0, "utf8"));
  process.stdout.write(JSON.stringify(texts.map(encode)) + "\n");
}
