#!/usr/bin/env bash
# Install the validator: from this checkout when it is GoodWoolf's own source, else the pinned source
# `woolf init` wrote below (docs/github.md): a git URL at a commit, or a wheel checked by its sha256.
# The package index does not serve goodwoolf, so nothing is installed by a bare version number.
set -euo pipefail
WOOLF_SOURCE='__WOOLF_SOURCE__'
# ci/constraints.txt (e.g. `pip freeze` of a validator that works), when the ledger commits one, pins
# every dependency; the privileged jobs (WOOLF_PRIVILEGED=1, ci/merge.sh) say when it is missing.
pin=()
if [ -f ci/constraints.txt ]; then
  pin=(-c ci/constraints.txt)
elif [ -n "${WOOLF_PRIVILEGED:-}" ]; then
  echo "warning: ci/constraints.txt is missing: this privileged job installs unpinned dependencies" >&2
fi
if grep -qs '^name = "goodwoolf"' pyproject.toml; then
  python -m pip install --quiet ${pin[@]+"${pin[@]}"} -e ".[s3]"
  exit 0
fi
case "$WOOLF_SOURCE" in
  git+*@*)
    python -m pip install --quiet ${pin[@]+"${pin[@]}"} "goodwoolf[s3] @ ${WOOLF_SOURCE}"
    ;;
  *.whl#sha256=*)
    url="${WOOLF_SOURCE%%#sha256=*}"
    want="${WOOLF_SOURCE##*#sha256=}"
    dir="$(mktemp -d)"
    python -m pip download --quiet --no-deps --dest "$dir" "$url"
    wheel="$(find "$dir" -name '*.whl' | head -n 1)"
    if [ -z "$wheel" ] || ! echo "$want  $wheel" | sha256sum --check --quiet -; then
      echo "error: the GoodWoolf wheel at $url does not have sha256 $want" >&2
      exit 1
    fi
    python -m pip install --quiet ${pin[@]+"${pin[@]}"} "${wheel}[s3]"
    ;;
  *)
    echo "error: ci/install.sh pins no GoodWoolf source: set WOOLF_SOURCE in it to" \
         "git+https://HOST/PATH@<40-hex commit> or https://HOST/PATH/NAME.whl#sha256=<64 hex>" \
         "(or run \`woolf init --woolf-source ...\` again; docs/github.md)" >&2
    exit 1
    ;;
esac
