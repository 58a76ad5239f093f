#!/bin/bash
# kill_resume.sh WEFT CONFIG SCRATCH
# Trains CONFIG for 60 steps uninterrupted; trains it again, kills the
# process with SIGKILL once it is past step 12 (checkpoints every 5 steps,
# so the kill may land in the middle of writing one), resumes from the run
# directory, and requires every step's loss and gradient norm to equal the
# uninterrupted run's (the JSON numbers round-trip doubles: the same bits).
set -euo pipefail
weft=$1 config=$2 dir=$3
rm -rf "$dir" && mkdir -p "$dir"
args=(train "$config" --steps 60 --no-progress)
"$weft" "${args[@]}" --out "$dir/whole" > "$dir/whole.log"

"$weft" "${args[@]}" --out "$dir/killed" > "$dir/killed.log" &
pid=$!
for _ in $(seq 1 2400); do
  if [ -f "$dir/killed/metrics.jsonl" ] && [ "$(wc -l < "$dir/killed/metrics.jsonl")" -ge 12 ]; then
    break
  fi
  sleep 0.025
done
kill -9 "$pid"
wait "$pid" 2> /dev/null || true
done_steps=$(wc -l < "$dir/killed/metrics.jsonl")
if [ "$done_steps" -ge 60 ]; then
  echo "the run finished before it could be killed; nothing was tested" >&2
  exit 1
fi
echo "killed after $done_steps steps"

"$weft" "${args[@]}" --resume "$dir/killed" --out "$dir/killed" > "$dir/resumed.log"
cat "$dir/resumed.log"

summary() { sed -E 's/.*("grad_norm":[^,]+).*("loss":[^,]+).*/\2 \1/' "$1"; }
if ! diff <(summary "$dir/whole/metrics.jsonl") <(summary "$dir/killed/metrics.jsonl"); then
  echo "the resumed run differs from the uninterrupted one" >&2
  exit 1
fi
echo "resume after SIGKILL: all 60 steps equal the uninterrupted run"
