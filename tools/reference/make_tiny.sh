#!/usr/bin/env bash
# Write the tiny release-layout checkpoint (config, BF16 shards, head, processor configs, the
# rebuilt Qwen3.5 tokenizer and manifest.sha256) into OUT_DIR. `make tiny` runs it for models/tiny.
#
#   tools/reference/make_tiny.sh OUT_DIR [--real-dims]
#
# Uses .venv-test's python (tools/reference/make_venv.sh test), else .venv-ref's, else .venv-tiny's
# (tools/reference/make_venv.sh tiny: what tools/setup.sh without --dev makes). Deterministic: the
# same bytes on every machine (see write_tiny.py for the seed and the
# generator). The tokenizer goes first so that manifest.sha256 (written last) covers it.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${1:?usage: $0 OUT_DIR [--real-dims]}"
shift
py="$root/.venv-test/bin/python"
[ -x "$py" ] || py="$root/.venv-ref/bin/python"
[ -x "$py" ] || py="$root/.venv-tiny/bin/python"
[ -x "$py" ] || { echo "make_tiny.sh: no .venv-test (tools/reference/make_venv.sh test), .venv-ref nor .venv-tiny (make_venv.sh tiny)" >&2; exit 1; }
mkdir -p "$out"
"$py" "$here/build_tokenizer.py" "$out"
"$py" "$here/write_tiny.py" "$out" "$@"
