#!/bin/sh
# fuzz/run.sh SECONDS RUNS TARGET... — run each libFuzzer target (built in
# build/fuzz/ by `make fuzz-build`) for SECONDS, or until RUNS executions
# when RUNS > 0, on a scratch corpus: the committed seeds
# (fuzz/corpus/<target>/) copied to build/fuzz/corpus/<target>/, where
# what a run finds interesting stays for the next run (the repo is never
# written). $FUZZ_JOBS targets run at a time (default 1; each is one
# process on one core). Prints one line per target, in the order given:
# executions, seconds, corpus size, findings. A finding keeps its input in
# build/fuzz/findings/<target>/ and makes the script exit 1 once every
# target has run.
set -u
cd "$(dirname "$0")/.."
secs=$1 runs=$2
shift 2
out=build/fuzz
jobs=${FUZZ_JOBS:-1}
case $jobs in '' | *[!0-9]* | 0) echo "fuzz/run.sh: FUZZ_JOBS='$jobs' is not a count of jobs" >&2; exit 2 ;; esac
found=0 passed=0 failed=0

# The largest input each target is given: a little over its largest seed,
# so that an input is always handled quickly.
max_len() {
  case $1 in
    safetensors|bundle|tunedb) echo 65536 ;;
    llama2c|gguf_vocab|tokenizer_json|template) echo 32768 ;;
    workload) echo 4096 ;;
    api) echo 16384 ;;
    jsonschema) echo 8192 ;;
    regex) echo 4096 ;;
    expr) echo 1024 ;;
    *) echo 65536 ;;
  esac
}
# Run target $1; its line (and, for a finding, the log's first reports)
# into $out/logs/$1.log.result, whose first word is "ok" or "finding".
one() {
  t=$1
  bin=$out/fuzz_$t corpus=$out/corpus/$t art=$out/findings/$t log=$out/logs/$t.log
  rm -rf "$art"
  mkdir -p "$corpus" "$art" "$out/logs"
  [ -d fuzz/corpus/$t ] && cp -p fuzz/corpus/$t/* "$corpus"/ 2>/dev/null
  dict=; [ -f fuzz/dict/$t.dict ] && dict=-dict=fuzz/dict/$t.dict
  maxlen=$(max_len "$t")
  limit="-max_total_time=$secs"; [ "$runs" -gt 0 ] && limit="$limit -runs=$runs"
  start=$(date +%s)
  # -timeout: one input may take 10 s at most; -rss_limit_mb: 2 GiB per
  # process; -use_value_profile learns comparisons of integers (counts,
  # sizes and lengths in headers) as well as of strings.
  "$bin" $limit $dict -max_len="$maxlen" -timeout=10 -rss_limit_mb=2048 -use_value_profile=1 \
    -print_final_stats=1 -artifact_prefix="$art/" "$corpus" >"$log" 2>&1
  rc=$?
  secs_run=$(( $(date +%s) - start ))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  files=$(ls "$corpus" | wc -l)
  kb=$(( $(cat "$corpus"/* | wc -c) / 1024 ))
  if [ "$rc" -ne 0 ] || ls "$art" | grep -q .; then
    { echo "finding fuzz_$t: FINDING after ${execs:-?} executions in ${secs_run}s (exit $rc): $(ls "$art" | head -n 3 | tr '\n' ' ')— see $log"
      grep -m 3 -E 'ERROR|SUMMARY|runtime error|Sanitizer|timeout' "$log" | sed 's/^/  /'; } >"$log.result"
  else
    echo "ok fuzz_$t: ${execs:-?} executions in ${secs_run}s, corpus $files files (${kb} KiB), no finding" >"$log.result"
  fi
}

# The lines of the targets in $group, in order, once they have ended.
flush() {
  wait
  for g in $group; do
    r=$out/logs/$g.log.result
    if [ -f "$r" ] && [ "$(head -c 3 "$r")" = "ok " ]; then
      passed=$((passed + 1))
      sed '1s/^ok //' "$r"
    else
      found=1 failed=$((failed + 1))
      if [ -f "$r" ]; then sed '1s/^finding //' "$r"; else echo "fuzz_$g: the run ended without a result"; fi
    fi
  done
  group= n=0
}

# $jobs targets at a time (a group waits for its slowest: they all run
# about SECONDS).
mkdir -p "$out/logs"
group= n=0
for t in "$@"; do
  rm -f "$out/logs/$t.log.result"
  one "$t" &
  group="$group $t" n=$((n + 1))
  [ "$n" -ge "$jobs" ] && flush
done
flush
echo "fuzz: $passed passed, $failed failed"
exit $found
