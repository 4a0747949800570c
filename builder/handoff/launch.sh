#!/bin/sh
# launch: run this repro bundle on this machine, with nothing but python3 (3.11 or later),
# coreutils and the package index pip is configured with. It is sealed with the bundle.
#
#   ./launch --key SIGNER.pub [options] [repro launch options, such as --signing-key KEY]
#   ./launch --trusted-keys DIR [options] [...]
#
# options:
#   --work DIR      where the bundle's serving environment, models and runs are made
#                   (default: ${XDG_DATA_HOME:-~/.local/share}/repro/bundles/<name>)
#   --anchor DIR    the directory the manifest's relative paths resolve against
#                   (default: inside the work tree, where the build had the manifest)
#   --runs DIR      where `repro launch` writes its run (default: runs/ of the work tree)
#   --force         let `repro restore` replace what exists there and differs
#   --verify-only   stop after `repro verify`: restore and start nothing
#
# In order, stopping with the reason at the first step that does not hold:
#   1. this machine: Linux on the architecture the bundle was sealed for, a python3 of 3.11 or
#      later, of the release series and platform the bundle's tools were pinned for;
#   2. the bundle: every file against SHA256SUMS (`sha256sum -c`) and the signature of the
#      statement that seals SHA256SUMS, with the key you named (openssl 3.0 or later). Nothing
#      is installed or run before both hold: the repro installed next is the bundle's own, so
#      this is the check that does not take the bundle's word; `repro verify` repeats it;
#      then, unless --verify-only, everything that refuses this machine without installing
#      anything (tools/launch_helper.py preflight, in seconds): the code its CPU selects against
#      the code the record ran (and what to run instead when they differ), the host facts the
#      manifest enforces, the server's port, and an interpreter the manifest admits for the
#      serving environment;
#   3. a private environment for the exact repro that sealed the bundle, made once under
#      ${XDG_CACHE_HOME:-~/.cache}/repro/envs/ (python3 -m venv; its dependencies and its
#      wheel installed by sha256 from tools/; pip check), and checked before every use
#      (tools/launch_helper.py check-env: every installed file against the pinned wheels);
#   4. that repro: `repro verify` (offline: the signature, every file, every claim), then
#      `repro restore` (the serving environment and models, each checked; not for a record
#      imported from its evidence, which pins none) and `repro launch` (preflight = verify
#      --host, run, judge, seal the run with --signing-key if given).
# Exit status: that of `repro launch`; 1 when a check fails, 2 for bad arguments, 3 when
# something needed cannot be found or made.

set -eu

say() { printf 'launch: %s\n' "$*" >&2; }
refuse() {
    status=$1
    shift
    printf 'launch: refused: %s\n' "$*" >&2
    exit "$status"
}
absolute() {
    case $1 in
        /*) printf '%s\n' "$1" ;;
        *) printf '%s/%s\n' "$PWD" "$1" ;;
    esac
}
usage() { sed -n '2,16s/^# \{0,1\}//p' "$self" >&2; }

case $0 in
    */*) self=$0 ;;
    *) self=./$0 ;;
esac
bundle=$(cd -- "$(dirname -- "$self")" && pwd) || refuse 3 "cannot enter the bundle's directory"
self=$bundle/launch

# --- arguments: ours are taken out, every other one goes to `repro launch` -----------------------
trust_option='' trust_value='' work='' anchor='' runs='' force='' verify_only='' pending=''
for argument do
    shift
    if [ -n "$pending" ]; then
        case $pending in
            --key | --trusted-keys)
                [ -z "$trust_option" ] || refuse 2 "name one of --key and --trusted-keys, once"
                trust_option=$pending trust_value=$(absolute "$argument") ;;
            --work) work=$(absolute "$argument") ;;
            --anchor) anchor=$(absolute "$argument") ;;
            --runs) runs=$(absolute "$argument") ;;
        esac
        pending=''
        continue
    fi
    case $argument in
        --key | --trusted-keys | --work | --anchor | --runs) pending=$argument ;;
        --force) force=--force ;;
        --verify-only) verify_only=yes ;;
        -h | --help) usage; exit 0 ;;
        *) set -- "$@" "$argument" ;;
    esac
done
[ -z "$pending" ] || refuse 2 "$pending needs a value"
[ -n "$trust_option" ] || refuse 2 "no key, no run: name the signer's public key with" \
    "--key PUB, or a directory of trusted *.pub keys with --trusted-keys DIR"
if [ "$trust_option" = --key ]; then
    [ -f "$trust_value" ] || refuse 2 "--key $trust_value: no such file"
else
    found_key=''
    for key in "$trust_value"/*.pub; do [ ! -f "$key" ] || found_key=$key; done
    [ -n "$found_key" ] || refuse 2 "--trusted-keys $trust_value: no *.pub key in it"
fi

# Nothing of the caller's Python setup reaches what runs here, nor a tool or an interpreter
# choice (.python-version) found in the bundle's directory: only absolute PATH entries are kept
# and everything runs from /.
unset PYTHONPATH PYTHONHOME PYTHONSTARTUP PYTHONUSERBASE VIRTUAL_ENV
kept='' old_ifs=$IFS
set -f
IFS=:
for entry in $PATH; do
    case $entry in /*) kept=${kept:+$kept:}$entry ;; esac
done
IFS=$old_ifs
set +f
PATH=$kept
export PATH
for variable in "${XDG_CACHE_HOME:-/}" "${XDG_DATA_HOME:-/}"; do
    case $variable in /*) ;; *) refuse 2 "XDG_CACHE_HOME and XDG_DATA_HOME must be absolute paths" ;; esac
done
cd / || refuse 3 "cannot enter /"
PYTHONDONTWRITEBYTECODE=1
export PYTHONDONTWRITEBYTECODE

# --- 1. this machine ------------------------------------------------------------------------------
[ "$(uname -s)" = Linux ] || refuse 1 "the bundle runs on Linux; this machine runs $(uname -s)"
for tool in sha256sum cut grep sed mktemp; do
    command -v "$tool" >/dev/null 2>&1 || refuse 3 "$tool is not on PATH (coreutils, grep, sed)"
done
python=$(command -v python3 2>/dev/null) || refuse 3 "no python3 on PATH: launch needs" \
    "python3, 3.11 or later"
version=$("$python" -I -c 'import sys; print(sys.version.split()[0])' 2>/dev/null) ||
    refuse 3 "$python does not run"
"$python" -I -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null ||
    refuse 1 "$python is Python $version; launch needs 3.11 or later"

# --- 2. the bundle's files, before anything is installed -----------------------------------------
[ -f "$bundle/SHA256SUMS" ] || refuse 1 "$bundle has no SHA256SUMS: not a sealed bundle"
listed() { grep -q "^[0-9a-f]\{64\}  $1\$" "$bundle/SHA256SUMS"; }
for name in launch lock.json tools/requirements.txt tools/launch_helper.py; do
    listed "$name" || refuse 1 "SHA256SUMS does not list $name"
done
wheel=$(sed -n 's/^[0-9a-f]\{64\}  tools\/\(repro_serving-[^/ ]*\.whl\)$/\1/p' "$bundle/SHA256SUMS")
case $wheel in
    '' | *'
'*) refuse 1 "SHA256SUMS does not list one repro wheel under tools/" ;;
esac
say "checking every file of $bundle against SHA256SUMS"
(cd -- "$bundle" && sha256sum -c --strict --quiet SHA256SUMS) >&2 ||
    refuse 1 "a file of the bundle is not the one sealed (above): nothing was installed"

try_key() {
    answer=$(openssl pkeyutl -verify -pubin -inkey "$1" -rawin -in "$scratch/pae" \
        -sigfile "$scratch/sig" 2>&1 || true)
    case $answer in
        *'Signature Verified Successfully'*) verified=$1 ;;
        *'Signature Verification Failure'*) refused=$1 ;;
    esac
}
check_signature() {
    # The repro installed next is the bundle's own: only this check is independent of the bundle.
    command -v openssl >/dev/null 2>&1 || refuse 3 "openssl (3.0 or later) is not on PATH:" \
        "launch checks the bundle's signature with it before it installs or runs anything"
    scratch=$(mktemp -d)
    sums=$(sha256sum <"$bundle/SHA256SUMS" | cut -c1-64)
    grep -qF "{\"digest\":{\"sha256\":\"$sums\"},\"name\":\"SHA256SUMS\"}" "$bundle/statement.json" ||
        refuse 1 "statement.json does not seal this SHA256SUMS: nothing was installed"
    sed -n 's/^{"payload":"\([A-Za-z0-9+/=]*\)".*/\1/p' "$bundle/statement.dsse.json" |
        base64 -d >"$scratch/payload" 2>/dev/null || true
    [ "$(sha256sum <"$scratch/payload")" = "$(sha256sum <"$bundle/statement.json")" ] ||
        refuse 1 "statement.json is not the payload of statement.dsse.json: nothing was installed"
    type=application/vnd.in-toto+json
    length=$(wc -c <"$bundle/statement.json")
    printf 'DSSEv1 %d %s %d ' "${#type}" "$type" "$length" >"$scratch/pae"
    cat "$bundle/statement.json" >>"$scratch/pae"
    verified='' refused=''
    for sig in $(grep -o '"sig":"[A-Za-z0-9+/=]*"' "$bundle/statement.dsse.json" | cut -d'"' -f4); do
        printf '%s' "$sig" | base64 -d >"$scratch/sig" 2>/dev/null || continue
        if [ "$trust_option" = --key ]; then
            try_key "$trust_value"
        else
            for key in "$trust_value"/*.pub; do try_key "$key"; done
        fi
    done
    rm -rf -- "$scratch"
    if [ -n "$verified" ]; then
        say "the statement sealing SHA256SUMS is signed by $verified (checked with openssl)"
    elif [ -n "$refused" ]; then
        refuse 1 "the signature of statement.dsse.json does not verify with $trust_value:" \
            "nothing was installed"
    else
        refuse 1 "no signature of statement.dsse.json could be checked with $trust_value" \
            "(openssl 3.0 or later checks Ed25519; a key it cannot read checks nothing):" \
            "nothing was installed"
    fi
}
check_signature

# What the lock says of the machine it was sealed for, and whether the tools fit this python3.
helper=$bundle/tools/launch_helper.py
facts=$("$python" -I -B "$helper" facts "$bundle/lock.json") || refuse 1 "lock.json cannot be read"
arch=$(printf '%s\n' "$facts" | sed -n 1p)
manifest_dir=$(printf '%s\n' "$facts" | sed -n 2p)
name=$(printf '%s\n' "$facts" | sed -n 3p)
kind=$(printf '%s\n' "$facts" | sed -n 4p)
[ -z "$arch" ] || [ "$arch" = "$(uname -m)" ] ||
    refuse 1 "the bundle was sealed for $arch; this machine is $(uname -m)"
"$python" -I -B "$helper" fits "$bundle/tools/requirements.txt" ||
    refuse 1 "this python3 cannot run the bundle's repro (above)"

serving_python=''
if [ -z "$verify_only" ]; then
    say "checking this machine against what the bundle ran on (nothing is installed yet)"
    serving_python=$("$python" -I -B "$helper" preflight "$bundle") ||
        refuse 1 "this machine cannot replay the bundle (above): nothing was installed"
fi

# --- 3. the private environment of the repro that sealed the bundle -------------------------------
wheel_sha=$(sha256sum <"$bundle/tools/$wheel" | cut -c1-64)
pins_sha=$(sha256sum <"$bundle/tools/requirements.txt" | cut -c1-64)
real_python=$("$python" -I -c 'import os, sys; print(os.path.realpath(sys.executable))')
key=$(printf '%s\n' "$wheel_sha" "$pins_sha" "$real_python" | sha256sum | cut -c1-64)
envs=${XDG_CACHE_HOME:-${HOME:?HOME is not set}/.cache}/repro/envs
env=$envs/$key
check_env() {
    "$python" -I -B "$helper" check-env "$1" "$bundle/tools/requirements.txt" "$bundle/tools/$wheel"
}

pip() {
    "$making/venv/bin/python" -I -B -m pip --disable-pip-version-check --quiet "$@"
}
make_env() {
    mkdir -p -- "$envs" || refuse 3 "cannot make $envs"
    making=$(mktemp -d "$envs/.making-XXXXXX") || refuse 3 "cannot write in $envs"
    trap 'rm -rf -- "$making"' EXIT
    say "making the private environment of $wheel in $env"
    "$python" -I -m venv "$making/venv" >&2 ||
        refuse 3 "python3 -m venv failed (on Debian and Ubuntu: apt install python3-venv)"
    pip download --no-deps --only-binary=:all: --require-hashes \
        -r "$bundle/tools/requirements.txt" -d "$making/wheels" >&2 ||
        refuse 3 "pip could not fetch repro's dependencies by their pinned sha256 (above)"
    cp -- "$bundle/tools/$wheel" "$making/wheels/$wheel"
    version_of_wheel=$(printf '%s\n' "$wheel" | cut -d- -f2)
    {
        cat -- "$bundle/tools/requirements.txt"
        printf 'repro-serving==%s --hash=sha256:%s\n' "$version_of_wheel" "$wheel_sha"
    } >"$making/install.txt"
    pip install --no-index --no-deps --no-compile --only-binary=:all: --require-hashes \
        --find-links "$making/wheels" -r "$making/install.txt" >&2 ||
        refuse 3 "pip could not install repro from the bundle's tools (above)"
    rm -f -- "$making/install.txt"
    pip check >&2 || refuse 1 "the bundle's tools do not hold every dependency of repro (above)"
    check_env "$making" || refuse 1 "the environment just made is not what was pinned (above)"
    if ! mv -T -- "$making" "$env" 2>/dev/null; then
        rm -rf -- "$making"  # another launch made it meanwhile
        check_env "$env" || refuse 1 "the private environment $env is not what was installed"
    fi
    trap - EXIT
}

if [ -d "$env" ]; then
    say "checking the private environment $env"
    check_env "$env" || refuse 1 "the private environment $env is not what was installed" \
        "(above): remove it, and launch makes it again"
else
    make_env
fi

repro() {
    "$env/venv/bin/python" -I -B -c \
        'import sys; sys.argv[0] = "repro"; from repro_serving.builder.cli import main; sys.exit(main())' "$@"
}

# --- 4. that repro: verify, restore, launch --------------------------------------------------------
say "repro verify $bundle (offline: the signature, every file, every claim)"
repro verify "$bundle" "$trust_option" "$trust_value" >&2 || {
    status=$?
    refuse "$status" "repro verify refused the bundle (above): nothing was restored or started"
}
[ -z "$verify_only" ] || exit 0

work=${work:-${XDG_DATA_HOME:-$HOME/.local/share}/repro/bundles/$name}
anchor=${anchor:-$work/$manifest_dir}
runs=${runs:-$work/runs}
mkdir -p -- "$anchor" "$runs" || refuse 3 "cannot make $anchor and $runs"
if [ "$kind" = imported ]; then
    say "an imported record pins no wheels, models or sources restore can make: not restored"
else
    say "repro restore $bundle into $work, the serving venv made with $serving_python"
    repro restore "$bundle" "$trust_option" "$trust_value" --anchor "$anchor" \
        --python "$serving_python" $force >&2 || {
        status=$?
        refuse "$status" "repro restore could not make what the bundle pins (above):" \
            "nothing started"
    }
fi
say "repro launch $bundle (runs in $runs)"
status=0
repro launch "$bundle" "$trust_option" "$trust_value" --anchor "$anchor" --runs "$runs" "$@" ||
    status=$?
exit "$status"
