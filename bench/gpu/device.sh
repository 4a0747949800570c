#!/usr/bin/env bash
# The steps on the accelerator host, each timed (STEP lines, epoch seconds). Run from the
# directory that holds the carried folders (p01/ ... p08/, code/); state kept between copies:
#   /root/stage  the parts received so far      /root/wh  the joined, checked wheelhouse
#   /root/rv     repro's own venv               /root/code  the repro source that runs here
#
#   device.sh probe                  facts of the host (GPU, driver, Python, what is installed)
#   device.sh receive DIR            move one part folder into /root/stage, check its sha256
#   device.sh code DIR               take DIR as /root/code
#   device.sh install                bench/gpu/install.sh /root/stage; the tiny model
#   device.sh smoke OUT              bench/gpu/smoke.py: one start by hand, audited
#   device.sh build OUT              repro build + verify of manifests/tiny-cuda.toml, packed
#   device.sh ngram OUT              repro run of the ngram profile, against the built teacher
#   device.sh launch OUT BUNDLE      repro verify --host, then repro launch of BUNDLE, sealed
set -uo pipefail
STAGE=/root/stage CODE=/root/code RV=/root/rv WH=/root/wh
SERVE_PY=${SERVE_PY:-/opt/torch/.venv/bin/python3}  # the host's own venv, copied by install.sh
SERVE_VENV=/root/serve-venv
MANIFEST=${MANIFEST:-manifests/tiny-cuda.toml}  # tiny-cuda-h200.toml on an H200
NAME=$(basename "$MANIFEST" .toml)
stamp() { echo "STEP $1 $(date +%s.%N)"; }
repro() { (cd "$CODE" && PYTHONPATH="$CODE" PIP_NO_INDEX=1 PIP_FIND_LINKS="$WH/wheels" \
  PIP_DISABLE_PIP_VERSION_CHECK=1 "$RV/bin/python" -m repro_serving "$@"); }

case "${1:-}" in
probe)
  stamp probe
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader
  uname -r; nproc; free -g | head -2; df -h / /root /tmp | tail -n +2
  "$SERVE_PY" -c 'import sys, torch; print(sys.version); print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))'
  "$SERVE_PY" -m pip --version
  "$SERVE_PY" -m pip list 2>/dev/null | grep -iE '^(numba|numpy|transformers|tokenizers|protobuf|setuptools|triton|pillow|opencv|uvloop|huggingface|aiohttp|psutil|requests|regex|tiktoken|sentencepiece|safetensors|pyyaml|cloudpickle|einops|ninja|prometheus|msgpack|llvmlite|py-cpuinfo|typing|grpcio|pydantic|fastapi|starlette|cryptography) '
  "$SERVE_PY" -m pip list 2>/dev/null | grep -iE '^(certifi|pip) '; du -sh /opt/torch/.venv
  head -3 /opt/torch/.venv/pyvenv.cfg; ls -la "$(dirname "$(readlink -f "$SERVE_PY")")" | head -3
  ldconfig -p | grep -E 'libcuda\.so|libnvidia-ml' || echo "libcuda not in the loader cache"
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"; which gcc cc curl zstd || true
  ls /root/stage 2>/dev/null | head; cat /root/.persist 2>/dev/null || echo "no earlier marker"
  date +%s > /root/.persist
  ;;
receive)
  stamp receive
  mkdir -p "$STAGE"; cat /root/.persist 2>/dev/null || echo "NO MARKER: a fresh machine"
  (cd "$2" && sha256sum -c --quiet SHA256SUMS) && mv "$2"/stage.tar.* "$2"/TAR_SHA256 "$STAGE"/
  ls -la "$STAGE"; df -h /root | tail -1
  ;;
code)
  rm -rf "$CODE" && cp -a "$2" "$CODE" && echo "code: $(cd "$CODE" && find . -type f | wc -l) files"
  ;;
install)
  bash "$CODE/bench/gpu/install.sh" "$STAGE" "$WH" || exit 1
  stamp model
  (cd "$CODE" && PYTHONPATH="$CODE" "$RV/bin/python" -c 'from pathlib import Path; from repro_serving.builder import tinymodel; print(tinymodel.generate(Path("build/tiny-llama")))')
  stamp installed
  ;;
smoke)
  stamp imports
  "$SERVE_VENV/bin/python3" "$CODE/bench/gpu/imports.py" vllm.entrypoints.openai.api_server \
    vllm.v1.engine.core vllm.v1.engine.async_llm vllm.v1.worker.gpu_worker \
    vllm.v1.worker.gpu_model_runner vllm.v1.attention.backends.flash_attn \
    vllm.model_executor.models.llama vllm.v1.spec_decode.ngram_proposer \
    vllm.compilation.backends vllm.v1.executor.uniproc_executor vllm.v1.sample.sampler \
    vllm.v1.structured_output vllm.entrypoints.openai.serving_chat 2>&1 | tee "$2/imports.txt"
  stamp smoke
  (cd "$CODE" && PYTHONPATH="$CODE" "$RV/bin/python" bench/gpu/smoke.py "$MANIFEST" "$2")
  rc=$?; cp "$2/smoke.json" /root/smoke.json 2>/dev/null; stamp smoked; exit $rc
  ;;
build)
  stamp build
  out=$2; mkdir -p "$out"
  if [ -f /root/smoke.json ] && ! "$RV/bin/python" -c 'import json, sys; s = json.load(open("/root/smoke.json")); sys.exit(0 if s.get("ready_s") and not s.get("audit_drifts") and not s.get("observe_drifts") else 1)'; then
    echo "the smoke start did not serve, or its audit or pins had drifts: no build"; exit 1
  fi
  if [ -f /root/smoke.json ]; then
    "$RV/bin/python" "$CODE/bench/gpu/processes.py" /root/smoke.json "$CODE/$MANIFEST" | tee "$out/processes.txt"
  fi
  rm -rf /root/bundles /root/build-run
  repro build "$MANIFEST" --signing-key keys/example.key --out /root/bundles --run-dir /root/build-run 2>&1 | tee "$out/build.log"
  rc=${PIPESTATUS[0]}; stamp built
  cp "$CODE/$MANIFEST" "$out/manifest-used.toml"
  (cd /root/build-run 2>/dev/null && tar -czf "$out/build-run.tgz" --exclude='home' --exclude='cwd' . 2>/dev/null)
  if [ "$rc" = 0 ]; then
    repro verify /root/bundles/$NAME --key keys/example.pub 2>&1 | tee "$out/verify.log"
    stamp verified
    repro pack "/root/bundles/$NAME" --out "$out/$NAME.tar" 2>&1 | tail -3
    sha256sum "$out/$NAME.tar"
  fi
  ls -la "$out"; exit $rc
  ;;
ngram)
  stamp ngram
  out=$2; mkdir -p "$out"; rm -rf /root/ngram-run
  teacher=/root/bundles/$NAME/oracle/teacher.json args=()
  if [ -f "$teacher" ]; then args=(--teacher "$teacher"); fi
  repro run "$MANIFEST" --profile ngram "${args[@]}" --run-dir /root/ngram-run 2>&1 | tee "$out/ngram.log"
  rc=${PIPESTATUS[0]}; stamp ran
  (cd /root/ngram-run 2>/dev/null && tar -czf "$out/ngram-run.tgz" --exclude='home' --exclude='cwd' . 2>/dev/null)
  ls -la "$out"; exit $rc
  ;;
launch)
  stamp launch
  out=$2 bundle=$(readlink -f "$3"); mkdir -p "$out"; rm -rf /root/runs
  repro verify "$bundle" --key keys/example.pub --host 2>&1 | tee "$out/verify-host.log"
  stamp preflight
  repro launch "$bundle" --key keys/example.pub --signing-key keys/example.key --runs /root/runs 2>&1 | tee "$out/launch.log"
  rc=${PIPESTATUS[0]}; stamp launched
  (cd /root/runs 2>/dev/null && tar -czf "$out/runs.tgz" --exclude='home' --exclude='cwd' . 2>/dev/null)
  ls -la "$out"; exit $rc
  ;;
*) sed -n 2,16p "$0"; exit 2 ;;
esac
