#!/usr/bin/env bash
# Every tracked C++ file as clang-format (the checked-in .clang-format) would
# write it; prints the files that differ and exits 1 when any does.
# `git clang-format` formats a change; `clang-format -i FILE` a file.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cc' '*.h')
bad=()
for f in "${files[@]}"; do
  if ! clang-format --dry-run -Werror "$f" > /dev/null 2>&1; then bad+=("$f"); fi
done
if [ ${#bad[@]} -gt 0 ]; then
  printf 'not clang-formatted: %s\n' "${bad[@]}"
  echo "${#bad[@]} files differ from clang-format: run clang-format -i on them (or git clang-format on a change)"
  exit 1
fi
echo "clang-format: all ${#files[@]} C++ files formatted"
