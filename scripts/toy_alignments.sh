#!/usr/bin/env bash
# How well the demo models' attention aligns words: each model trained on the toy task,
# then its forced alignments of the toy test set (`score --alignments`) scored against the
# toy's gold alignments (`evaluate-alignments`). docs/decoding.md gives the figures.
#   scripts/toy_alignments.sh [WORK_DIR]     (default runs/toy-alignments; resumable)
set -euo pipefail
work=${1:-runs/toy-alignments}
SEQ2SEQ=${SEQ2SEQ:-seq2seq}
python scripts/make_toy_data.py --out data/toy > /dev/null
aer() {  # NAME [--alignment-head H]: the run's forced alignments of the test set, scored
  local name=$1
  shift
  $SEQ2SEQ score --run "$work/$name" --src data/toy/test.src --ref data/toy/test.tgt \
    --alignments "$work/$name.align" "$@" > /dev/null
  $SEQ2SEQ evaluate-alignments --gold data/toy/test.align --hyp "$work/$name.align"
}
run() {  # NAME CONFIG [--set FIELD=VALUE ...]
  local name=$1 config=$2
  shift 2
  $SEQ2SEQ train --config "configs/$config.yaml" --run-dir "$work/$name" "$@" 2> "$work/$name.log"
  local bleu scores
  bleu=$(python -c 'import json, sys; print(json.load(open(sys.argv[1]))["test"]["bleu"])' \
    "$work/$name/test/scores.json")
  scores=$(aer "$name")
  echo "$name (test BLEU $bleu): $scores"
}
mkdir -p "$work"
run rnn-bahdanau demo
run rnn-dot demo --set model.attention.type=dot
run transformer demo_transformer
for head in 0 1 2 3; do  # the Transformer's last layer has 4 heads
  scores=$(aer transformer --alignment-head $head)
  echo "transformer, head $head: $scores"
done
