#!/usr/bin/env bash
# The GPU figures of docs/benchmarks.md ("On a GPU"), from the repository root of a machine
# with a CUDA GPU, a CUDA build of torch and data/multi30k (scripts/prepare_multi30k.py):
#   [BASE=DIR] scripts/bench_gpu.sh OUT PART...
#   PART: recipe, resume, train, speed, losses, decode, study, normalizers, tests (or all)
# BASE: a checkout of an older commit (its seq2seq/ at least): `speed`, `losses` and
# `decode` then measure it too, alternately with this one, each line labelled "code": "base"
# or "new". Each part appends JSON lines (and keeps its logs) in OUT:
#   recipe  the Transformer recipe trained on the GPU for 300 updates (runs/gpu-recipe)
#   resume  after recipe, a resume check: 200 updates straight against 100 then resumed to 200 (bf16): the
#           training loss logged every 20 updates from 121 on (a resumed run logs its first
#           update, 101, so its 120 averages 19 updates) and the validation losses compared
#   train   training speed of the recipe in bf16, fp16 and fp32 (scripts/bench.py train),
#           timed after 150 updates: the first epoch (about 115) meets every batch shape anew
#   speed   the recipe in bf16 at its 4,096-token batches, with CUDA graphs and without, and a
#           Transformer-base-sized model (d_model 512, 6+6 layers, 8 heads, feed-forward
#           2,048) at 25,000-token batches, each with a profile of 10 more updates
#   losses  the loss of each of the recipe's first 100 updates (bf16), with CUDA graphs and
#           without
#   tests   the GPU's own tests, then the whole suite on CUDA (`auto`), 8 processes
#   decode  translate test_2016_flickr with that run at beam 1 and 5 on the GPU, with this
#           code's default batches (decode.batch_tokens null) and with 4,000 tokens
#   study   one run of the study Transformer at the study's budget (1,500 updates, the
#           attention diagnostics, three test sets), its wall time; then N runs side by side
#           (300 updates each, no test) for N in 1 2 4 8, their wall time
#   normalizers  the cells of the study's step 6 (configs/sweeps/attention_normalizers_*.yaml:
#           sparse and hard attention), seed 1, 300 updates in bf16 and the three test sets,
#           each architecture's cells trained at once by one `sweep --jobs N --jobs-per-gpu N`;
#           then the RNN's update speed with the exact marginal against the softmax
#   multilingual  scripts/multilingual_benchmark.py's 20 runs, JOBS (16) at once, then its
#           table (OUT/multilingual.md); the runs in docs/results/multilingual/runs
set -euo pipefail
PY=${PYTHON:-python3}
out=${1:?usage: scripts/bench_gpu.sh OUT PART...}
shift
mkdir -p "$out" runs
test_set=data/multi30k/test_2016_flickr
recipe=configs/multi30k_transformer.yaml

seconds_of() {  # run a command, append {"what": NAME, "seconds": S, "status": RC} to OUT/wall.jsonl
  local name=$1 start status=0
  shift
  start=$(date +%s.%N)
  "$@" || status=$?
  $PY -c "import json,sys; print(json.dumps({'what': sys.argv[1], 'seconds': round(float(sys.argv[3]) - float(sys.argv[2]), 1), 'status': int(sys.argv[4])}))" \
    "$name" "$start" "$(date +%s.%N)" "$status" | tee -a "$out/wall.jsonl"
}

logged_losses() {  # {step: loss} of a train.log's training lines from step $2 on, and its validations
  $PY -c "import re,sys; t = open(sys.argv[1]).read(); print({**{int(s): float(l) for s, l in re.findall(r'\bstep (\d+)  epoch .*?loss ([\d.]+)', t) if int(s) >= int(sys.argv[2])}, **{f'valid {s}': float(l) for s, l in re.findall(r'validation at step (\d+):.*?loss ([\d.]+)', t)}})" "$1" "$2"
}

part_recipe() {
  rm -rf runs/gpu-recipe
  seconds_of recipe-300-updates $PY -m seq2seq train --config $recipe --run-dir runs/gpu-recipe \
    --set train.max_steps=300 > "$out/recipe.log" 2>&1
}

part_resume() {
  rm -rf runs/gpu-straight runs/gpu-resumed
  local budget=(--set train.valid_every=50 --set data.test=[])
  for run in gpu-straight gpu-resumed; do  # the recipe run's tokenizer, not trained again
    mkdir -p runs/$run && cp -r runs/gpu-recipe/tokenizer runs/$run/tokenizer
  done
  $PY -m seq2seq train --config $recipe --run-dir runs/gpu-straight "${budget[@]}" \
    --set train.max_steps=200 > "$out/resume.log" 2>&1
  for steps in 100 200; do
    $PY -m seq2seq train --config $recipe --run-dir runs/gpu-resumed "${budget[@]}" \
      --set train.max_steps=$steps >> "$out/resume.log" 2>&1
  done
  $PY -c "import json,sys; a, b = eval(sys.argv[1]), eval(sys.argv[2]); print(json.dumps({'what': 'resume', 'compared': list(map(str, a)), 'same_steps': a.keys() == b.keys(), 'max_abs_diff': max(abs(a[k] - b.get(k, float('inf'))) for k in a)}))" \
    "$(logged_losses runs/gpu-straight/train.log 121)" "$(logged_losses runs/gpu-resumed/train.log 121)" \
    | tee -a "$out/resume.jsonl"
}

labelled() {  # run a command, add {"code": CODE} to each JSON line it prints
  local code=$1
  shift
  "$@" | $PY -c "import json,sys; [print(json.dumps({'code': sys.argv[1], **json.loads(l)}), flush=True) for l in sys.stdin if l.startswith('{')]" "$code"
}

each_code() {  # run a bench.py command with the BASE code (if any), then with this one
  if [ -n "${BASE:-}" ]; then
    SEQ2SEQ_BENCH_CODE=$BASE labelled base $PY scripts/bench.py "$@"
  fi
  labelled new $PY scripts/bench.py "$@"
}

BASE_SIZED=(--set model.embed_dim=512 --set model.hidden_dim=512 --set model.ff_dim=2048
  --set model.encoder_layers=6 --set model.decoder_layers=6 --set model.attention.heads=8
  --set model.self_attention.heads=8 --set train.batch_tokens=25000)

part_speed() {
  local recipe_train=(train --config $recipe --set train.precision=bf16 --tokenizer runs/gpu-recipe/tokenizer)
  {
    each_code "${recipe_train[@]}" --warmup 150 --steps 100 --profile 10
    labelled new-eager $PY scripts/bench.py "${recipe_train[@]}" --warmup 150 --steps 100 \
      --profile 10 --set train.cuda_graphs=false
    each_code "${recipe_train[@]}" "${BASE_SIZED[@]}" --warmup 40 --steps 30 --profile 25
  } 2> "$out/speed.log" | tee -a "$out/speed.jsonl"
}

part_losses() {
  local losses=(losses --config $recipe --set train.precision=bf16 --steps 100 --tokenizer runs/gpu-recipe/tokenizer)
  {
    each_code "${losses[@]}"
    labelled new-eager $PY scripts/bench.py "${losses[@]}" --set train.cuda_graphs=false
  } 2> "$out/losses.log" | tee -a "$out/losses.jsonl"
}

part_tests() {
  $PY -m pytest -q -rs tests/test_cuda.py tests/test_precision.py tests/test_update.py \
    > "$out/pytest-cuda.log" 2>&1 || true
  tail -3 "$out/pytest-cuda.log"
  $PY -m pytest -q -rs -n 8 -p no:cacheprovider > "$out/pytest.log" 2>&1 || true
  tail -3 "$out/pytest.log"
}

part_train() {
  for precision in bf16 fp16 fp32; do
    $PY scripts/bench.py train --config $recipe --set train.precision=$precision --steps 100 \
      --warmup 150 --tokenizer runs/gpu-recipe/tokenizer
  done | tee -a "$out/train.jsonl"
}

part_decode() {  # the base at its 4,000-token batches; this code at its GPU default, and at 4,000
  local decode=(decode --run runs/gpu-recipe --checkpoint last --device cuda
    --input $test_set.de.gz --ref $test_set.en.gz --beam 1 5)
  {
    if [ -n "${BASE:-}" ]; then
      SEQ2SEQ_BENCH_CODE=$BASE labelled base $PY scripts/bench.py "${decode[@]}"
    fi
    labelled new $PY scripts/bench.py "${decode[@]}"
    labelled new-4000 $PY scripts/bench.py "${decode[@]}" --batch-tokens 4000
  } 2> "$out/decode.log" | tee -a "$out/decode.jsonl"
}

part_study() {
  local study=(--config configs/study/transformer.yaml --set train.attention_diagnostics=true)
  rm -rf runs/gpu-study*
  seconds_of study-run-1500-updates $PY -m seq2seq train "${study[@]}" --run-dir runs/gpu-study \
    --set train.max_steps=1500 > "$out/study.log" 2>&1
  for n in 1 2 4 8; do
    side_by_side "$n"
  done
}

side_by_side() {  # N short study runs at once, each with the study run's tokenizer
  local n=$1 pids=() i
  local start
  start=$(date +%s.%N)
  for i in $(seq "$n"); do
    rm -rf "runs/gpu-study-$n-$i" && mkdir -p "runs/gpu-study-$n-$i"
    cp -r runs/gpu-study/tokenizer "runs/gpu-study-$n-$i/tokenizer"
    $PY -m seq2seq train --config configs/study/transformer.yaml --run-dir "runs/gpu-study-$n-$i" \
      --set train.max_steps=300 --set data.test=[] --set seed="$i" \
      > "runs/gpu-study-$n-$i.log" 2>&1 &
    pids+=($!)
  done
  local status=0
  for pid in "${pids[@]}"; do wait "$pid" || status=1; done
  $PY -c "import json,sys; print(json.dumps({'what': 'side-by-side', 'runs': int(sys.argv[1]), 'updates_each': 300, 'seconds': round(float(sys.argv[3]) - float(sys.argv[2]), 1), 'status': int(sys.argv[4])}))" \
    "$n" "$start" "$(date +%s.%N)" "$status" | tee -a "$out/wall.jsonl"
}

shortened() {  # write sweep $1 as $2 with seed 1, 300 updates and bf16; print its cell count
  $PY -c "import sys, yaml; s = yaml.safe_load(open(sys.argv[1])); s['name'] += '-gpu'; s['seeds'] = [1]; s['set'].update({'train.max_steps': 300, 'train.precision': 'bf16'}); yaml.safe_dump(s, open(sys.argv[2], 'w')); print(len(s['cells']))" "$1" "$2"
}

part_normalizers() {
  local arch cells sweep
  for arch in rnn transformer; do
    sweep=runs/gpu-normalizers-$arch
    rm -rf "$sweep" && mkdir -p "$sweep"
    cells=$(shortened "configs/sweeps/attention_normalizers_$arch.yaml" "$sweep.yaml")
    seconds_of "normalizers-$arch-$cells-runs" $PY -m seq2seq sweep --config "$sweep.yaml" \
      --sweep-dir "$sweep" --jobs "$cells" --jobs-per-gpu "$cells" > "$out/normalizers-$arch.log" 2>&1
  done
  tar -czf "$out/normalizers.tar.gz" --exclude='*.pt' --exclude='events.out.*' runs/gpu-normalizers-*
  local rnn=(train --config configs/study/rnn.yaml --set model.attention.type=general
    --tokenizer runs/gpu-normalizers-rnn/tokenizer --warmup 30 --steps 100)
  {
    $PY scripts/bench.py "${rnn[@]}"
    $PY scripts/bench.py "${rnn[@]}" --set model.attention.normalizer=hard \
      --set model.attention.hard.estimator=exact
  } 2> "$out/exact.log" | tee -a "$out/exact.jsonl"
}

part_multilingual() {
  seconds_of multilingual-runs $PY scripts/multilingual_benchmark.py train --jobs "${JOBS:-16}" \
    > "$out/multilingual.log" 2>&1
  $PY scripts/multilingual_benchmark.py table > "$out/multilingual.md"
}

[ "$#" -gt 0 ] || set -- all
[ "$1" = all ] && set -- recipe resume train speed losses decode study normalizers tests
for part in "$@"; do
  "part_$part"
done
