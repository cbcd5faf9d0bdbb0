#!/usr/bin/env bash
# How well the demo models' attention aligns words: each model trained on the toy task,
# then its forced alignments of the toy test set (`score --alignments`) scored against the
# toy's gold alignments (`evaluate-alignments`). docs/decoding.md gives the figures.
#   scripts/toy_alignments.sh [WORK_DIR]     (default runs/toy-alignments; resumable)
set -euo pipefail
work=${1:-runs/toy-alignments}
SEQ2SEQ=${SEQ2SEQ:-seq2seq}
python scripts/make_toy_data.py --out data/toy > /dev/null
run() {  # NAME CONFIG [--set FIELD=VALUE ...]
  local name=$1 config=$2
  shift 2
  $SEQ2SEQ train --config "configs/$config.yaml" --run-dir "$work/$name" "$@" 2> "$work/$name.log"
  $SEQ2SEQ score --run "$work/$name" --src data/toy/test.src --ref data/toy/test.tgt \
    --alignments "$work/$name.align" > /dev/null
  local bleu
  bleu=$(python -c 'import json, sys; print(json.load(open(sys.argv[1]))["test"]["bleu"])' \
    "$work/$name/test/scores.json")
  echo "$name (test BLEU $bleu): $($SEQ2SEQ evaluate-alignments --gold data/toy/test.align \
    --hyp "$work/$name.align")"
}
mkdir -p "$work"
run rnn-bahdanau demo
run rnn-dot demo --set model.attention.type=dot
run transformer demo_transformer
