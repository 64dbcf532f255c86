#!/usr/bin/env bash
# Run a command while a private single-node Slurm cluster runs, then stop exactly that cluster.
#
#   scripts/with_slurm.sh python -m pytest
#
# Installs Debian's Slurm packages (slurmctld slurmd slurm-client munge) when they are missing and this is root
# with apt; otherwise runs the command without Slurm (the slurm-marked tests then skip, or fail under CI=true).
# The cluster's state lives in $UNIRL_SLURM_DIR (a fresh temp dir by default); SLURM_CONF points clients at it.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

have_slurm() { command -v slurmctld >/dev/null 2>&1 || [[ -x /usr/sbin/slurmctld ]]; }

if ! have_slurm; then
    if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
        echo "with_slurm: installing slurmctld slurmd slurm-client munge (Debian packages)" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            slurmctld slurmd slurm-client munge >/dev/null
    else
        echo "with_slurm: Slurm is not installed and cannot be (needs root and apt); running without it" >&2
        exec "$@"
    fi
fi

export UNIRL_SLURM_DIR="${UNIRL_SLURM_DIR:-$(mktemp -d /tmp/unirl-slurm.XXXXXX)}"
export SLURM_CONF="$UNIRL_SLURM_DIR/slurm.conf"
"$here/slurm_local.sh" start >&2
trap '"$here/slurm_local.sh" stop >&2' EXIT
status=0
"$@" || status=$?
exit "$status"
