#!/usr/bin/env bash
# Install the Debian packages the tests need beside Python's, when they are missing:
#   bubblewrap (>= 0.8) and libseccomp2   the sandbox for generated code (unirl/sandbox.py)
#   chromium                              the headless browser that opens `unirl report`'s page (tests/test_report.py)
# (Slurm's packages are installed by scripts/with_slurm.sh.) Needs root and apt; elsewhere it says what is missing
# and exits 0, so the tests that need a package skip (or fail under CI=true). Run it again: it installs nothing twice.
set -euo pipefail

missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
ldconfig -p 2>/dev/null | grep -q 'libseccomp\.so\.2' || missing+=(libseccomp2)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
[ ${#missing[@]} -eq 0 ] && exit 0
if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "system_packages: installing ${missing[*]} (Debian packages)" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
    echo "system_packages: missing ${missing[*]}; install them (apt install ${missing[*]}) to run the sandbox" \
         "and browser tests" >&2
fi
