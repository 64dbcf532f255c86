#!/usr/bin/env bash
# A private single-node Slurm cluster for CI and development: start | stop | status.
#
# Everything lives in one state directory ($UNIRL_SLURM_DIR, default /tmp/unirl-slurm): slurm.conf, cgroup.conf, the
# munge key and socket, spool, state, logs and the PIDs of the three daemons this script started. Clients find the
# cluster through SLURM_CONF=$UNIRL_SLURM_DIR/slurm.conf (`start` prints the export line on stderr). No slurmdbd:
# unirl must work on clusters without accounting (no sacct), so CI tests exactly that.
#
# Installs nothing: CI installs the Debian packages before calling this.
# Facts behind the choices here: /work/shared/research/infra.md section 2.
set -euo pipefail

STATE_DIR="${UNIRL_SLURM_DIR:-/tmp/unirl-slurm}"
PARTITION="${UNIRL_SLURM_PARTITION:-debug}"
CTLD_PORT="${UNIRL_SLURM_CTLD_PORT:-6817}"
SLURMD_PORT="${UNIRL_SLURM_SLURMD_PORT:-6818}"
START_TIMEOUT_S="${UNIRL_SLURM_START_TIMEOUT_S:-60}"
DAEMONS=(munged slurmctld slurmd)
INSTALL_LINE="apt-get update && apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge"

export SLURM_CONF="$STATE_DIR/slurm.conf"

log() { echo "slurm_local: $*" >&2; }

require_packages() {
    local missing=()
    for tool in munged slurmctld slurmd sinfo sbatch scontrol; do
        command -v "$tool" >/dev/null 2>&1 || [[ -x "/usr/sbin/$tool" ]] || missing+=("$tool")
    done
    if ((${#missing[@]})); then
        log "missing: ${missing[*]}; install the Debian packages first:"
        echo "$INSTALL_LINE"
        exit 1
    fi
}

# Debian puts the daemons in /usr/sbin, which a non-login root shell in a container may not have on PATH.
daemon_path() { command -v "$1" 2>/dev/null || echo "/usr/sbin/$1"; }

pid_alive() { [[ -n "$1" ]] && kill -0 "$1" 2>/dev/null; }

recorded_pid() { [[ -f "$STATE_DIR/$1.pid" ]] && cat "$STATE_DIR/$1.pid" || true; }

node_state() { sinfo -h -n localhost -o '%T' 2>/dev/null | head -n1 || true; }

# slurmd 22.05 always initialises a cgroup plugin, even with proctrack/linuxproc + task/none, and `autodetect` fails
# where /sys/fs/cgroup has neither cgroup2 nor a v1 `systemd/` hierarchy (containers): cgroup/v1 starts there.
cgroup_plugin() {
    local fs
    fs=$(stat -fc %T /sys/fs/cgroup 2>/dev/null || echo missing)
    if [[ "$fs" == cgroup2fs || -d /sys/fs/cgroup/systemd ]]; then echo autodetect; else echo cgroup/v1; fi
}

write_cgroup_conf() { printf 'CgroupPlugin=%s\n' "$1" >"$STATE_DIR/cgroup.conf"; }

write_slurm_conf() {
    local cpus mem_mb user
    cpus=$(nproc)
    mem_mb=$(awk '/^MemTotal:/ {print int($2 / 1024) - 1024}' /proc/meminfo)
    ((mem_mb > 512)) || mem_mb=512
    user=$(id -un)
    cat >"$SLURM_CONF" <<EOF
# Written by scripts/slurm_local.sh: a private single-node cluster, all state under $STATE_DIR.
ClusterName=unirl
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$STATE_DIR/munge/munge.socket
StateSaveLocation=$STATE_DIR/state
SlurmdSpoolDir=$STATE_DIR/spool/%n
SlurmctldPidFile=$STATE_DIR/slurmctld.daemon.pid
SlurmdPidFile=$STATE_DIR/slurmd.daemon.pid
SlurmctldLogFile=$STATE_DIR/log/slurmctld.log
SlurmdLogFile=$STATE_DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$STATE_DIR/log/jobcomp.log
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
# Finished jobs stay visible to scontrol for 5 minutes: the only record of a job's end without slurmdbd.
MinJobAge=300
# A cancelled job's processes get SIGTERM, then SIGKILL after KillWait seconds: short, so CI does not wait.
KillWait=5
InactiveLimit=0
SlurmdTimeout=60
NodeName=localhost NodeAddr=127.0.0.1 NodeHostname=$(hostname) CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=$PARTITION Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
}

start_munged() {
    local key="$STATE_DIR/munge/munge.key"
    if [[ ! -s "$key" ]]; then
        dd if=/dev/urandom of="$key" bs=1024 count=1 status=none
        chmod 400 "$key"
    fi
    # --force: munged refuses to run with its files under a world-writable parent such as /tmp otherwise.
    setsid "$(daemon_path munged)" --foreground --force --key-file="$key" \
        --socket="$STATE_DIR/munge/munge.socket" --pid-file="$STATE_DIR/munge/munged.daemon.pid" \
        --seed-file="$STATE_DIR/munge/munged.seed" --log-file="$STATE_DIR/log/munged.log" \
        </dev/null >>"$STATE_DIR/log/munged.out" 2>&1 &
    echo $! >"$STATE_DIR/munged.pid"
    for _ in $(seq 50); do
        [[ -S "$STATE_DIR/munge/munge.socket" ]] && return 0
        pid_alive "$(recorded_pid munged)" || break
        sleep 0.1
    done
    log "munged did not start; its log:"
    tail -n 20 "$STATE_DIR/log/munged.log" "$STATE_DIR/log/munged.out" >&2 || true
    return 1
}

start_slurmctld() {
    setsid "$(daemon_path slurmctld)" -D -f "$SLURM_CONF" </dev/null >>"$STATE_DIR/log/slurmctld.out" 2>&1 &
    echo $! >"$STATE_DIR/slurmctld.pid"
}

start_slurmd() {
    setsid "$(daemon_path slurmd)" -D -N localhost -f "$SLURM_CONF" </dev/null >>"$STATE_DIR/log/slurmd.out" 2>&1 &
    echo $! >"$STATE_DIR/slurmd.pid"
}

# Wait until the node is idle (or allocated/mixed: a job recovered from an earlier run may hold it). Returns 1 if a
# daemon died on the way, 2 on timeout.
wait_for_node() {
    local deadline=$((SECONDS + START_TIMEOUT_S)) state
    while ((SECONDS < deadline)); do
        for daemon in slurmctld slurmd; do
            pid_alive "$(recorded_pid "$daemon")" || { log "$daemon exited"; return 1; }
        done
        state=$(node_state)
        case "$state" in
            idle* | mixed* | allocated*) return 0 ;;
            down* | drain*) scontrol update nodename=localhost state=resume >/dev/null 2>&1 || true ;;
        esac
        sleep 0.2
    done
    return 2
}

all_running() {
    for daemon in "${DAEMONS[@]}"; do
        pid_alive "$(recorded_pid "$daemon")" || return 1
    done
}

cmd_start() {
    require_packages
    mkdir -p "$STATE_DIR"/{state,spool,log,munge}
    chmod 700 "$STATE_DIR" "$STATE_DIR/munge"
    if all_running && [[ -f "$SLURM_CONF" ]] && wait_for_node; then
        log "already running (state dir $STATE_DIR); export SLURM_CONF=$SLURM_CONF"
        echo "$PARTITION"
        return 0
    fi
    # Half a cluster (one daemon died): stop what is left and start over from the same state directory.
    cmd_stop quiet
    mkdir -p "$STATE_DIR"/{state,spool,log,munge}
    write_slurm_conf
    write_cgroup_conf "$(cgroup_plugin)"
    local started=$SECONDS
    start_munged
    start_slurmctld
    start_slurmd
    local status=0
    wait_for_node || status=$?
    if ((status == 1)) && ! grep -q 'cgroup/v1' "$STATE_DIR/cgroup.conf"; then
        # autodetect can still fail (a read-only or hybrid hierarchy): cgroup/v1 rescued every case we tried.
        log "slurmd failed with CgroupPlugin=autodetect; retrying with cgroup/v1"
        stop_pid slurmd
        write_cgroup_conf cgroup/v1
        start_slurmd
        status=0
        wait_for_node || status=$?
    fi
    if ((status != 0)); then
        log "the node did not become idle within ${START_TIMEOUT_S}s; last log lines:"
        tail -n 15 "$STATE_DIR"/log/slurmctld.log "$STATE_DIR"/log/slurmd.log "$STATE_DIR"/log/*.out >&2 2>/dev/null || true
        cmd_stop quiet
        exit 1
    fi
    log "started in $((SECONDS - started))s (state dir $STATE_DIR); clients need: export SLURM_CONF=$SLURM_CONF"
    echo "$PARTITION"
}

# SIGTERM to one recorded PID, SIGKILL after 10 s; forgets the PID either way.
stop_pid() {
    local name=$1 pid
    pid=$(recorded_pid "$name")
    rm -f "$STATE_DIR/$name.pid"
    pid_alive "$pid" || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do
        pid_alive "$pid" || return 0
        sleep 0.1
    done
    log "$name ($pid) ignored SIGTERM; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 50); do
        pid_alive "$pid" || return 0
        sleep 0.1
    done
    log "$name ($pid) is still alive"
    return 1
}

cmd_stop() {
    local quiet=${1:-}
    # Jobs still running on this private cluster would outlive slurmd (their slurmstepd is its own process):
    # cancel them while the controller can still do it, and give them KillWait to go.
    if pid_alive "$(recorded_pid slurmctld)" && [[ -n "$(squeue -h -o %i 2>/dev/null)" ]]; then
        scancel --full "$(squeue -h -o %i | paste -sd, -)" 2>/dev/null || true
        for _ in $(seq 100); do
            [[ -z "$(squeue -h -o %i 2>/dev/null)" ]] && break
            sleep 0.1
        done
    fi
    local failed=0
    # Reverse start order: the node first, munge last (the daemons need it to say goodbye).
    for daemon in slurmd slurmctld munged; do
        stop_pid "$daemon" || failed=1
    done
    [[ -n "$quiet" ]] || log "stopped (state dir $STATE_DIR)"
    return $failed
}

cmd_status() {
    local code=0
    for daemon in "${DAEMONS[@]}"; do
        local pid
        pid=$(recorded_pid "$daemon")
        if pid_alive "$pid"; then echo "$daemon: running (pid $pid)"; else echo "$daemon: stopped"; code=1; fi
    done
    if ((code == 0)); then
        echo "SLURM_CONF=$SLURM_CONF"
        sinfo 2>&1 || code=1
    fi
    return $code
}

case "${1:-}" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    *)
        echo "usage: $0 start|stop|status   (state dir: \$UNIRL_SLURM_DIR, default /tmp/unirl-slurm)" >&2
        exit 2
        ;;
esac
