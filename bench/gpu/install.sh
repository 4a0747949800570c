#!/usr/bin/env bash
# Install the staged wheels (bench/gpu/stage.py) on the accelerator host, offline.
#
#   bench/gpu/install.sh STAGE_DIR [WHEELHOUSE]
#
# STAGE_DIR holds the parts stage.tar.01, stage.tar.02, ... and TAR_SHA256. The parts are joined
# and the tar checked against TAR_SHA256, then every wheel against wheels.lock (the lock inside
# the tar, the same bytes as bench/gpu/wheels.lock).
#
# The serving venv ($SERVE_VENV) is a copy of the host's ready-made one ($SERVE_FROM: torch and
# its CUDA libraries, which no copy of a few tens of MiB could carry), made clean first by
# cleanvenv.py: files no RECORD lists removed, distributions whose files the host rewrote
# reinstalled from the `spare` wheels of their exact versions. The `serve` wheels go into it,
# the `tools` wheels into a venv of repro's own ($TOOLS_VENV), made from the same interpreter
# without pip. Nothing is fetched and no dependency is resolved (--no-index --no-deps): what is
# installed is exactly the lock.
set -euo pipefail
STAGE=${1:?usage: install.sh STAGE_DIR [WHEELHOUSE]}
WH=${2:-/root/wh}
SERVE_FROM=${SERVE_FROM:-/opt/torch/.venv}
SERVE_VENV=${SERVE_VENV:-/root/serve-venv}
TOOLS_VENV=${TOOLS_VENV:-/root/rv}
HERE=$(cd "$(dirname "$0")" && pwd)
PIP=(-m pip install --quiet --no-index --no-deps --no-compile --disable-pip-version-check)
stamp() { echo "STEP $1 $(date +%s.%N)"; }

stamp join
read -r want _ < "$STAGE/TAR_SHA256"
cat "$STAGE"/stage.tar.[0-9][0-9] > "$WH.tar"
echo "$want  $WH.tar" | sha256sum -c --quiet
rm -rf "$WH" && mkdir -p "$WH" && tar -xf "$WH.tar" -C "$WH" && rm -f "$WH.tar"
(cd "$WH" && awk '!/^#/ {print $4 "  wheels/" $2}' wheels.lock | sha256sum -c --quiet)
echo "joined: $(ls "$WH"/wheels | wc -l) wheels, each as wheels.lock names it"

stamp copy
rm -rf "$SERVE_VENV" && cp -a "$SERVE_FROM" "$SERVE_VENV"
echo "copied $SERVE_FROM to $SERVE_VENV: $(du -sh "$SERVE_VENV" | cut -f1)"
SERVE_PY=$SERVE_VENV/bin/python3

stamp clean
"$SERVE_PY" "$HERE/cleanvenv.py" "$SERVE_VENV" "$WH/wheels" | tee "$WH/clean.txt"
mapfile -t again < <(sed -n 's/^REINSTALL //p' "$WH/clean.txt")
if [ "${#again[@]}" -gt 0 ]; then "$SERVE_PY" "${PIP[@]}" --force-reinstall "${again[@]}"; fi

stamp serve
mapfile -t serve < <(awk -v w="$WH/wheels/" '!/^#/ && $1 ~ /serve/ {print w $2}' "$WH/wheels.lock")
"$SERVE_PY" "${PIP[@]}" "${serve[@]}"
"$SERVE_PY" "$HERE/cleanvenv.py" "$SERVE_VENV" "$WH/wheels" | tee -a "$WH/clean.txt"

stamp tools
mapfile -t tools < <(awk -v w="$WH/wheels/" '!/^#/ && $1 ~ /tools/ {print w $2}' "$WH/wheels.lock")
rm -rf "$TOOLS_VENV"
"$SERVE_FROM/bin/python3" -m venv --without-pip "$TOOLS_VENV"
pip_wheel=$(printf '%s\n' "${tools[@]}" | grep '/pip-')
"$TOOLS_VENV/bin/python" "$pip_wheel/pip" install --quiet --no-index --no-deps --no-compile \
  --disable-pip-version-check "${tools[@]}"
stamp done
