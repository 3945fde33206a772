#!/usr/bin/env bash
# Regenerate the tiny checkpoint and the reference fixtures, in one go:
#   1. tools/reference/make_tiny.sh models/tiny     (numpy only; deterministic bytes; + the tokenizer)
#   2. .venv-ref/bin/python tools/reference/make_fixtures.py
#        -> tests/fixtures/tiny/index.json + tests/fixtures/tiny/data.bin
# Needs .venv-test (or .venv-ref) for step 1 and .venv-ref (tools/reference/make_venv.sh ref) for step 2.
# CPU only, fp32, torch threads 1: running it twice gives bit-identical fixture files on one machine.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"
[ -x .venv-ref/bin/python ] || { echo "regen.sh: no .venv-ref (tools/reference/make_venv.sh ref)" >&2; exit 1; }
"$here/make_tiny.sh" models/tiny
CUDA_VISIBLE_DEVICES= .venv-ref/bin/python "$here/make_fixtures.py" --model models/tiny --corpus tests/corpus \
  --out tests/fixtures/tiny "$@"
