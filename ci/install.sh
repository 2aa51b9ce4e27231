#!/usr/bin/env bash
# Install the validator: from this checkout when it is GoodWoolf's own source, else the pinned release.
set -euo pipefail
python -m pip install --quiet --upgrade pip
if grep -qs '^name = "goodwoolf"' pyproject.toml; then
  python -m pip install --quiet -e ".[s3]"
else
  python -m pip install --quiet "goodwoolf[s3]==0.1.0"
fi
