#!/bin/sh
# demo.sh — the whole pipeline on this machine's CPU, run by `make demo`:
# write a small Llama-3-style model with deterministic random fp16 weights
# and a byte-level tokenizer of its own, tune every kernel its forward
# needs (a capped sample of each template's space, every candidate verified
# against fp64), build a bundle from the winners, and generate tokens with
# it; then the same model from text, with no bundle step.
set -eu
cd "$(dirname "$0")/.."
out=build/demo
mkdir -p "$out"
export GCORE_CACHE="$PWD/$out/cache"
budget=${DEMO_BUDGET:-4}
model=$out/model
if [ ! -f "$model/tokenizer.json" ]; then
  echo "== writing $model: Llama-3 style (GQA 8/2 heads, llama3 RoPE scaling), 4 layers, fp16, random weights, a byte-level tokenizer =="
  /usr/bin/python3 tests/tinymodel.py "$model" --dim 256 --hidden-dim 704 --n-layers 4 \
    --n-heads 8 --n-kv-heads 2 --vocab 2048 --max-seq 1024 --llama3-rope --dtype f16 --seed 1 \
    --tokenizer
fi
echo "== gcore-tune: every op of the model, $budget candidates per problem (reused where an earlier run measured them) =="
bin/gcore-tune --model "$model" --prefill 32 --batch 1 --db "$out/tune.db" --budget "$budget"
echo
echo "== gcore-gen: a bundle from the winners =="
bin/gcore-gen --model "$model" --prefill 32 --db "$out/tune.db" -o "$out/model.gcb"
echo
echo "== gcore-run: a 32-token prompt, 64 tokens generated greedily =="
bin/gcore-run -m "$model" -b "$out/model.gcb" -n 64 --temp 0 --ignore-eos \
  --tokens 1,50,100,150,200,250,300,350,400,450,500,550,600,650,700,750,800,850,900,950,1000,1050,1100,1150,1200,1250,1300,1350,1400,1450,1500,1550
echo
echo "== gcore-run without a bundle: text in, text out (random weights: the text is noise), any prompt length =="
bin/gcore-run -m "$model" --db "$out/tune.db" -p "Once upon a time, Lily saw a big red ball." -n 32 --temp 0
echo
echo "Rerun as DEMO_BUDGET=$((budget * 2)) make demo to go on to more candidates per problem (what the database holds is reused; nothing is measured twice)."
echo "Database: $out/tune.db   bundle: $out/model.gcb   model: $model"
