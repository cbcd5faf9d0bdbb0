#!/usr/bin/env bash
# How well the demo models' attention aligns words: each model trained on the toy task
# (seeds 1 to 3), without guidance and with it (guided alignment: data.alignments, the
# toy's gold alignments of its training pairs, at the default train.alignment_weight),
# then its forced alignments of the toy test set (`score --alignments`, the heads' mean,
# and for the unguided Transformer each head alone) scored against the toy's gold
# alignments (`evaluate-alignments`). docs/decoding.md gives the figures.
#   scripts/toy_alignments.sh [WORK_DIR]     (default runs/toy-alignments; resumable)
set -euo pipefail
work=${1:-runs/toy-alignments}
SEQ2SEQ=${SEQ2SEQ:-seq2seq}
python scripts/make_toy_data.py --out data/toy > /dev/null
aer() {  # RUN [--alignment-head H]: the run's forced alignments of the test set, scored
  local run=$1
  shift
  $SEQ2SEQ score --run "$work/$run" --src data/toy/test.src --ref data/toy/test.tgt \
    --alignments "$work/$run.align" "$@" > /dev/null
  $SEQ2SEQ evaluate-alignments --gold data/toy/test.align --hyp "$work/$run.align"
}
run() {  # NAME SEED CONFIG [--set FIELD=VALUE ...]
  local run="$1,seed=$2" seed=$2 config=$3
  shift 3
  $SEQ2SEQ train --config "configs/$config.yaml" --run-dir "$work/$run" --set "seed=$seed" \
    "$@" 2> "$work/$run.log"
  local bleu scores
  bleu=$(python -c 'import json, sys; print(json.load(open(sys.argv[1]))["test"]["bleu"])' \
    "$work/$run/test/scores.json")
  scores=$(aer "$run")
  echo "$run (test BLEU $bleu): $scores"
}
mkdir -p "$work"
for seed in 1 2 3; do
  run rnn-bahdanau "$seed" demo
  run rnn-dot "$seed" demo --set model.attention.type=dot
  run transformer "$seed" demo_transformer
  # No time limit: on a busy machine the configs' 7 minutes would end them before their
  # epochs, as they did not the runs above.
  run rnn-bahdanau-guided "$seed" demo --set data.alignments=true --set train.max_time=null
  run transformer-guided "$seed" demo_transformer --set data.alignments=true \
    --set train.max_time=null
  for head in 0 1 2 3; do  # the Transformer's last layer has 4 heads
    scores=$(aer "transformer,seed=$seed" --alignment-head "$head")
    echo "transformer,seed=$seed, head $head: $scores"
  done
done
