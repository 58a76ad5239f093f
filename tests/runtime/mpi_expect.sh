#!/bin/bash
# mpi_expect.sh <limit_s> <exit_code|nonzero> <expected text>... -- <command>...
# Runs an MPI job that must fail: passes when it exits within limit_s seconds
# with the given exit code (or any non-zero one) and its output contains every
# expected text. The job runs in its own session; afterwards everything left
# of it is killed (SIGKILL), including a rank that stopped itself (SIGSTOP)
# and wrote its pid to $WEFT_STOPPED_PID_FILE, and the test checks that no
# such process remains.
set -u
limit=$1 want=$2
shift 2
expects=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do expects+=("$1"); shift; done
shift
pidfile=$(mktemp) out=$(mktemp)
export WEFT_STOPPED_PID_FILE=$pidfile
start=$(date +%s%N)
setsid "$@" >"$out" 2>&1 &
job=$!
deadline=$(( $(date +%s) + limit ))
while kill -0 "$job" 2>/dev/null && [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.1; done
running=0
kill -0 "$job" 2>/dev/null && running=1
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
# Clean up: the job's session, then the stopped rank itself.
kill -KILL -- "-$job" 2>/dev/null
stopped=$(cat "$pidfile" 2>/dev/null)
[ -n "$stopped" ] && kill -KILL "$stopped" 2>/dev/null
wait "$job" 2>/dev/null
rc=$?
echo "exit $rc after ${elapsed_ms} ms"
echo "--- output"; cat "$out"; echo "---"
fail() { echo "FAILED: $*"; rm -f "$pidfile" "$out"; exit 1; }
[ "$running" = 1 ] && fail "the job did not end within ${limit} s"
if [ "$want" = nonzero ]; then
  [ "$rc" -ne 0 ] || fail "expected a failure, but the job succeeded"
else
  [ "$rc" -eq "$want" ] || fail "expected exit code $want, got $rc"
fi
for text in "${expects[@]}"; do
  grep -qF -- "$text" "$out" || fail "the output does not contain '$text'"
done
if [ -n "$stopped" ]; then
  for _ in $(seq 50); do kill -0 "$stopped" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$stopped" 2>/dev/null && fail "the stopped rank (pid $stopped) is still alive"
fi
rm -f "$pidfile" "$out"
echo "passed"
