#!/usr/bin/env bash
# Install the validator: from this checkout when it is GoodWoolf's own source, else the pinned release.
set -euo pipefail
# ci/constraints.txt (e.g. `pip freeze` of a validator that works), when the ledger commits one, pins
# every dependency; the privileged jobs (WOOLF_PRIVILEGED=1, ci/merge.sh) say when it is missing.
pin=()
if [ -f ci/constraints.txt ]; then
  pin=(-c ci/constraints.txt)
elif [ -n "${WOOLF_PRIVILEGED:-}" ]; then
  echo "warning: ci/constraints.txt is missing: this privileged job installs unpinned dependencies" >&2
fi
python -m pip install --quiet ${pin[@]+"${pin[@]}"} --upgrade pip
if grep -qs '^name = "goodwoolf"' pyproject.toml; then
  python -m pip install --quiet ${pin[@]+"${pin[@]}"} -e ".[s3]"
else
  python -m pip install --quiet ${pin[@]+"${pin[@]}"} "goodwoolf[s3]==__WOOLF_VERSION__"
fi
