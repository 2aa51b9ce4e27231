#!/usr/bin/env bash
# Scheduled CI step: validate every PR still open, in the order the forge received them.
# One PR's failure is that PR's verdict (or it stays open for the next sweep), never the end of the sweep.
set -euo pipefail
: "${GITHUB_TOKEN:?GITHUB_TOKEN must be set}"
WOOLF_PRIVILEGED=1 bash ci/install.sh  # it holds write secrets: pinned by ci/constraints.txt where committed
auth=$(printf 'x-access-token:%s' "$GITHUB_TOKEN" | base64 -w0)
git config --local "http.https://github.com/.extraheader" "AUTHORIZATION: basic $auth"
git config --local user.name "woolf-validator"
git config --local user.email "woolf-validator@users.noreply.github.com"
if [ -n "${WOOLF_VALIDATOR_KEY:-}" ]; then  # a signed ledger: the validator's SSH key signs merges and votes
  key_file=$(mktemp) && chmod 600 "$key_file"
  trap 'rm -f "$key_file"' EXIT  # the key never outlives this job on a (self-hosted) runner
  printf '%s\n' "$WOOLF_VALIDATOR_KEY" > "$key_file"
  export WOOLF_SIGNING_KEY="$key_file"
fi
if [ -n "${WOOLF_HIDDEN_BENCHMARK_URL:-}" ]; then  # the validators' private benchmark (woolf checks size and sha256)
  curl -fsS --proto =https --max-time 300 --max-filesize 1073741824 -o "$RUNNER_TEMP/hidden-benchmark" \
    "$WOOLF_HIDDEN_BENCHMARK_URL"
  export WOOLF_HIDDEN_BENCHMARK="$RUNNER_TEMP/hidden-benchmark"
fi
# with a quorum, each validator's sweep leg (WOOLF_VALIDATOR) evaluates and casts that validator's vote
woolf validate --forge github --all --name "${WOOLF_VALIDATOR:-sweeper}"
