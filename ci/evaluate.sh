#!/usr/bin/env bash
# Unprivileged CI step: evaluate one pull request (PR_NUMBER) with the base branch's code.
# The PR is read as data by `woolf validate`; nothing from it is checked out or run.
set -euo pipefail
: "${PR_NUMBER:?PR_NUMBER must be set}"
case "$PR_NUMBER" in *[!0-9]*) echo "PR_NUMBER is not a number" >&2; exit 2 ;; esac
bash ci/install.sh
woolf validate --forge github --evaluate-only verdict.json "$PR_NUMBER"
