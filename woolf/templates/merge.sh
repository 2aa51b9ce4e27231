#!/usr/bin/env bash
# Privileged CI step: carry out the verdict in verdict.json. `woolf validate --apply`
# re-checks the PR head and main, reruns the cheap checks, recomputes the merge,
# uploads the weights, then fast-forwards main (or closes the PR with its reason).
# With validators.quorum > 1 it casts this validator's (WOOLF_VALIDATOR's) signed vote
# from the record instead, and settles the PR when that vote completes the quorum.
set -euo pipefail
: "${GITHUB_TOKEN:?GITHUB_TOKEN must be set}"
WOOLF_PRIVILEGED=1 bash ci/install.sh  # pinned by ci/constraints.txt where the ledger commits one
auth=$(printf 'x-access-token:%s' "$GITHUB_TOKEN" | base64 -w0)
git config --local "http.https://github.com/.extraheader" "AUTHORIZATION: basic $auth"
git config --local user.name "woolf-validator"
git config --local user.email "woolf-validator@users.noreply.github.com"
if [ -n "${WOOLF_VALIDATOR_KEY:-}" ]; then  # a signed ledger: the validator's SSH key signs the merge
  key_file=$(mktemp) && chmod 600 "$key_file"
  trap 'rm -f "$key_file"' EXIT  # the key never outlives this job on a (self-hosted) runner
  printf '%s\n' "$WOOLF_VALIDATOR_KEY" > "$key_file"
  export WOOLF_SIGNING_KEY="$key_file"
fi
if [ -n "${WOOLF_HIDDEN_BENCHMARK_URL:-}" ]; then  # it measures the benchmark again: the validators' private one
  curl -fsS --proto =https --max-time 300 --max-filesize 1073741824 -o "$RUNNER_TEMP/hidden-benchmark" \
    "$WOOLF_HIDDEN_BENCHMARK_URL"
  export WOOLF_HIDDEN_BENCHMARK="$RUNNER_TEMP/hidden-benchmark"
fi
woolf validate --forge github --apply verdict.json
