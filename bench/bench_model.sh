# bench_model.sh — sourced by the GPU bench scripts: bench_model S Q W
# sets M to the bench's random-weight model of shape S in folder W
# (bench/gpu_llama.py's: an fp16 Hugging Face folder, written once) or,
# with a mix Q (q4_0, q4_k_m, q5_k_m, q8_0), a GGUF file of that mix, and
# S to the name its results carry (S, or S-Q).
bench_model() {
  if [ -n "$2" ]; then
    M=$3/m_$1-$2.gguf
    python3 -c "import sys; sys.path.insert(0, 'bench'); import gpu_llama as G; G.write_gguf_model('$M', G.SHAPES['$1'], '$2')"
    S=$1-$2
  else
    M=$3/m_$1
    [ -d $M ] || python3 -c "import sys; sys.path.insert(0, 'bench'); import gpu_llama as G; G.write_model('$M', G.SHAPES['$1'])"
    S=$1
  fi
}
