#!/usr/bin/env bash
# Unprivileged CI step: evaluate one pull request (PR_NUMBER) with the base branch's code.
# The PR is read as data by `woolf validate`; nothing from it is checked out or run.
set -euo pipefail
: "${PR_NUMBER:?PR_NUMBER must be set}"
case "$PR_NUMBER" in *[!0-9]*) echo "PR_NUMBER is not a number" >&2; exit 2 ;; esac
bash ci/install.sh
if [ -n "${WOOLF_HIDDEN_BENCHMARK_URL:-}" ]; then  # the validators' private benchmark (woolf checks size and sha256)
  curl -fsS --proto =https --max-time 300 --max-filesize 1073741824 -o "$RUNNER_TEMP/hidden-benchmark" \
    "$WOOLF_HIDDEN_BENCHMARK_URL"
  export WOOLF_HIDDEN_BENCHMARK="$RUNNER_TEMP/hidden-benchmark"
fi
woolf validate --forge github --evaluate-only verdict.json "$PR_NUMBER"
