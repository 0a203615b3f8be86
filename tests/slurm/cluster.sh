# A single-node SLURM cluster for tests, started by hand without systemd
# (source this file; /work/shared/notes/INFRA.md has the recipe it follows).
# Everything lives under one directory: munge's socket and key copy, the
# daemons' state, spool, logs and pid files, TmpFS, and slurm.conf. Ports are
# picked free so that two clusters (two test runs) do not meet; TmpFS keeps
# srun --mpi=pmix's spmix_appdir_<uid>_<job>.<step> directories apart too
# (every cluster's first job is job 1: a shared /tmp made the second
# cluster's step fail with "Cannot create directory ... File exists").
#   slurm_start DIR   start munged, slurmctld and slurmd; wait (bounded) until
#                     the node is idle; export SLURM_CONF. Returns non-zero,
#                     with the daemons' logs on stderr, if it does not come up.
#                     With SLURM_MEM_CGROUP=1, memory is a resource a job asks
#                     for (--mem) and each job runs in a memory cgroup limited
#                     to it (task/cgroup, ConstrainRAMSpace), as on production
#                     clusters; the cgroups are named after the node
#                     (slurm_HOST/uid_0/job_N), so one such cluster at a time.
#   slurm_stop DIR    stop the three daemons by pid (and wait for them).
# Needs root (SlurmUser root) and the packages slurm-wlm and munge.

slurm_free_port() { # a TCP port no socket uses, below the kernel's ephemeral range
    local p lo
    lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
    for _ in $(seq 1 50); do
        p=$((20000 + RANDOM % (lo > 21000 ? lo - 20000 : 1000)))
        ss -Htan "sport = :$p" 2>/dev/null | grep -q . || { echo "$p"; return 0; }
    done
    return 1
}

# (another test's daemon, or a connection's port, may take a port between
# the look and the bind: slurmctld then exits "Address already in use", and
# the start is tried again on other ports, three times at most)
slurm_start() {
    local attempt
    for attempt in 1 2 3; do
        slurm_start_once "$1" && return 0
        grep -q "Address already in use" "$1/slurmctld.log" "$1/slurmd.log" 2>/dev/null || return 1
        echo "slurm_start: a port was taken (attempt $attempt); again on others" >&2
        slurm_stop "$1"
        rm -f "$1/slurmctld.log" "$1/slurmd.log"
    done
    return 1
}

slurm_start_once() {
    local d=$1 host cpus mem_mb p1 p2 i
    # munged wants its socket's directory searchable by all and writable by
    # nobody else, and its key private.
    mkdir -p "$d/state" "$d/spool" "$d/munge" "$d/key" "$d/tmp"
    chmod 0755 "$d" "$d/munge"
    chmod 0700 "$d/key"
    install -m 0600 /etc/munge/munge.key "$d/key/munge.key" || return 1
    host=$(hostname -s)
    cpus=$(nproc)
    mem_mb=$(awk '/MemTotal/ { printf "%d", $2 / 1024 * 0.9 }' /proc/meminfo)
    p1=$(slurm_free_port) && p2=$(slurm_free_port) || return 1
    local proctrack=proctrack/pgid task=task/none select=CR_Core
    if [ -n "${SLURM_MEM_CGROUP:-}" ]; then # each job in a memory cgroup limited to its --mem
        proctrack=proctrack/cgroup task=task/cgroup select=CR_Core_Memory
        printf 'ConstrainRAMSpace=yes\nConstrainSwapSpace=yes\n' >"$d/cgroup.conf"
    fi
    [ "$p1" != "$p2" ] || p2=$((p1 + 1))
    cat >"$d/slurm.conf" <<CONF
ClusterName=sttest
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$p1
SlurmdPort=$p2
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$d/munge/munge.socket
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
TmpFS=$d/tmp
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd.pid
SlurmctldLogFile=$d/slurmctld.log
SlurmdLogFile=$d/slurmd.log
ProctrackType=$proctrack
TaskPlugin=$task
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=$select
MpiDefault=none
ReturnToService=2
MailProg=/bin/true
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
    export SLURM_CONF=$d/slurm.conf
    munged --socket="$d/munge/munge.socket" --key-file="$d/key/munge.key" --pid-file="$d/munged.pid" \
        --log-file="$d/munged.log" --seed-file="$d/key/seed" || { cat "$d/munged.log" >&2; return 1; }
    slurmctld -f "$d/slurm.conf" || { cat "$d/slurmctld.log" >&2; return 1; }
    slurmd -f "$d/slurm.conf" || { cat "$d/slurmd.log" >&2; return 1; }
    for i in $(seq 1 300); do # at most ~30 s (and sinfo's own 3 s each) for the node to register
        [ "$(timeout 3 sinfo -h -o %T 2>/dev/null)" = "idle" ] && return 0
        grep -q "Address already in use" "$d/slurmctld.log" "$d/slurmd.log" 2>/dev/null && return 1
        sleep 0.1
    done
    echo "slurm_start: the node did not become idle: $(sinfo 2>&1)" >&2
    tail -n 20 "$d/slurmctld.log" "$d/slurmd.log" >&2
    return 1
}

slurm_stop() {
    local d=$1 f p i
    for f in slurmd slurmctld munged; do
        p=$(cat "$d/$f.pid" 2>/dev/null) || continue
        [ -n "$p" ] || continue
        kill "$p" 2>/dev/null || continue
        for i in $(seq 1 100); do # at most ~10 s, then SIGKILL
            kill -0 "$p" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$p" 2>/dev/null
    done
    return 0
}

# For the end-to-end tests (after tests/lib/e2e.sh): slurm_e2e_tmpdir makes
# the test's $tmp (e2e_tmpdir) searchable by all, as munged wants every
# directory above its socket, and makes slurm_down "$tmp/cluster" its
# e2e_cleanup; slurm_up DIR starts the cluster or fails the test;
# slurm_down DIR ends every job of it, waiting for the queue to drain, then
# stops the daemons.
slurm_e2e_tmpdir() {
    e2e_tmpdir
    chmod 0755 "$tmp"
    e2e_cleanup() { slurm_down "$tmp/cluster"; }
    export OMP_WAIT_POLICY=PASSIVE
}

slurm_up() {
    slurm_start "$1" || { echo "FAIL: the SLURM cluster did not start"; exit 1; }
    SLURM_UP=1
}

slurm_down() {
    local i
    if [ -n "${SLURM_UP:-}" ]; then
        scancel --full --quiet --user=root 2>/dev/null
        for i in $(seq 1 100); do
            [ -z "$(squeue -h 2>/dev/null)" ] && break
            sleep 0.1
        done
    fi
    slurm_stop "$1"
}

# job_state JOB: its JobState (scontrol keeps ended jobs for MinJobAge, 300 s).
job_state() { scontrol show job "$1" 2>/dev/null | grep -oE 'JobState=[A-Z_]+' | cut -d= -f2; }

# slurm_tiny_gpt DIR STEPS CHECKPOINT_EVERY BIN [MODEL]: DIR/t.tokens and
# DIR/tiny.yaml, a 1-layer gpt the SLURM tests train (1 thread a rank,
# output in DIR/run); MODEL: another model's settings (the flow mapping's
# inside).
slurm_tiny_gpt() {
    local i
    for i in $(seq 1 200); do echo "the quick brown fox $i jumps over the lazy dog $((i * 7 % 13))"; done >"$1/t.txt"
    "$4" data tokenize "$1/t.tokens" "$1/t.txt" >/dev/null || { echo "FAIL: tokenize"; exit 1; }
    cat >"$1/tiny.yaml" <<YAML
model: { ${5:-type: gpt, n_layer: 1, n_head: 2, n_embd: 16, block_size: 16} }
data:  { type: tokens, train: $1/t.tokens, val: "" }
train: { batch_size: 8, steps: $2, checkpoint_every: $3, threads: 1, out_dir: $1/run }
dist:  { timeout_s: 60 }
log:   { peak_gflops: 10, progress: "off", every: 1 }
YAML
}
