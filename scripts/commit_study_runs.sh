#!/usr/bin/env bash
# Commit the attention study's finished runs (docs/results/attention-study-v2.md) from the
# checkout that trains them into this repository, one commit per run, as they finish:
#   scripts/commit_study_runs.sh STUDY_CHECKOUT STEP SWEEP_DIR_NAME...
#   e.g. scripts/commit_study_runs.sh ../study6 6 attention-normalizers-rnn attention-normalizers-transformer
# A run is finished once its test/scores.json is written; what is committed is what
# docs/results/.gitignore keeps (config, log, summary.json, test/, the attention files).
# A study checkout whose commit predates the runs' own init-attention.json has its
# sweep's report measure it first, while the checkpoints are there. Run from anywhere;
# SEQ2SEQ_PYTHON names the Python that has seq2seq's requirements (default: python3).
set -euo pipefail
study=$(cd "$1" && pwd) step=$2
shift 2
python=${SEQ2SEQ_PYTHON:-python3}
cd "$(dirname "$0")/.."
for sweep in "$@"; do
  for run in "$study/docs/results/$sweep/runs"/*/; do
    if [ -f "$run/test/scores.json" ] && [ ! -f "$run/init-attention.json" ]; then
      (cd "$study" && PYTHONPATH="$study" "$python" -m seq2seq sweep report "docs/results/$sweep" > /dev/null)
      break
    fi
  done
  for run in "$study/docs/results/$sweep/runs"/*/; do
    name=$(basename "$run") dest="docs/results/$sweep/runs/$(basename "$run")"
    [ -f "$run/test/scores.json" ] && [ ! -f "$dest/test/scores.json" ] || continue
    mkdir -p "$dest/test"
    for file in config.yaml meta.json summary.json train.log init-attention.json best-attention.json; do
      if [ -f "$run/$file" ]; then cp "$run/$file" "$dest/$file"; fi
    done
    cp "$run"/test/scores.json "$run"/test/*.hyp "$dest/test/"
    git add "$dest"
    git commit -q -m "Attention study v2, step $step: $sweep/$name"
    echo "committed $sweep/$name"
  done
done
