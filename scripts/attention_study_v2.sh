#!/usr/bin/env bash
# The attention study's second edition (docs/results/attention-study-v2.md), a step at a
# time: `scripts/attention_study_v2.sh STEP` (STEP 1 to 7, or `all` for 1 to 7 in order)
# runs the step's sweeps in two shards side by side, from the repository root, and waits
# for both. Each sweep configs/sweeps/NAME.yaml goes to docs/results/NAME (underscores as
# dashes); the shards' logs to runs/logs/. Resumable: the same command skips finished runs
# and resumes interrupted ones. It exits non-zero if a run failed (the logs name it), after
# every other run of the step. In the background:
#   nohup scripts/attention_study_v2.sh 1 > runs/logs/study-v2-step-1.log 2>&1 &
set -uo pipefail
SEQ2SEQ=${SEQ2SEQ:-seq2seq}   # the command; e.g. SEQ2SEQ="python -m seq2seq"

sweeps_of() {
  case "$1" in
    1) echo attention_transformer_v2 ;;
    2) echo attention_rnn_v2 ;;
    3) echo attention_temperature_rnn attention_temperature_transformer attention_qknorm ;;
    4) echo attention_width ;;
    5) echo attention_rnn_v2_long attention_transformer_v2_long ;;  # after steps 1 and 2
    6) echo attention_normalizers_rnn attention_normalizers_transformer attention_normalizers_rnn_scaled_dot ;;
    7) echo attention_rnn_v2_fren attention_rnn_v2_ende attention_transformer_v2_fren attention_transformer_v2_ende ;;
    *) return 1 ;;
  esac
}

run_step() {
  local step=$1 sweeps pids=() status=0
  sweeps=$(sweeps_of "$step") || { echo "usage: $0 STEP (1-7, or all)" >&2; return 2; }
  for shard in 1 2; do
    (
      failed=0
      for sweep in $sweeps; do
        $SEQ2SEQ sweep --config "configs/sweeps/$sweep.yaml" \
          --sweep-dir "docs/results/${sweep//_/-}" --shard "$shard/2" || failed=1
      done
      exit $failed
    ) > "runs/logs/study-v2-step-$step-shard-$shard.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || status=1; done
  echo "step $step: $([ $status = 0 ] && echo done || echo 'done, with failed runs: see runs/logs')"
  return $status
}

cd "$(dirname "$0")/.." && mkdir -p runs/logs || exit 1
if [ "${1:-}" = all ]; then
  for step in 1 2 3 4 5 6 7; do run_step "$step" || exit 1; done
else
  run_step "${1:-}"
fi
