#!/usr/bin/env bash
# Runs every test program of one or more build folders and the end-to-end
# tests, then prints one closing line: "N passed, N failed, N skipped".
# A test program exits 0 (pass), 77 (skip, after printing why) or anything
# else (fail); one that runs past 900 s is ended and fails. Usage:
# tests/run.sh BUILD [SANITIZER_BUILD [EMULATOR_BUILD [TSAN_BUILD]]]
# EMULATOR_BUILD: the CUDA emulator's build (`make emu`, tests/cudaemu/),
# whose CUDA tests run their kernels on the CPU; the end-to-end tests named
# tests/e2e/emu_*.sh are given it instead of BUILD. TSAN_BUILD: `make tsan`'s
# (ThreadSanitizer), for tests/tsan.sh.
set -u
cd "$(dirname "$0")/.."
build=${1:-build}
asan=${2:-}
emu=${3:-}
tsan=${4:-}
# Tests run TEST_JOBS at a time (default: the machine's cores, at most 2):
# most take one core or wait on a process, a file or a timeout, and none
# shares a path, a port or a name with another (each has a folder of its
# own, mktemp's). The tests whose scripts hold the line "# tests/run.sh:
# serial" (a resource of the machine that one of them uses at a time: a
# SLURM test cluster) run one at a time, each in the first free lane once
# the one before it has ended; one that holds "# tests/run.sh: light" (it
# mostly waits: mpirun's start and end, a timeout it provokes, another
# rank's slow write) may run beside them, two such at a time
# (TEST_LIGHT); those that hold "# tests/run.sh: long" start before the
# others (below). And when the machine has been idle for a good part of the
# last 3 s (the tests in the lanes waiting: on mpirun's start, a timeout, a
# SLURM daemon), TEST_EXTRA more lanes open (default 1; 0: none): a test's
# own line says how much CPU it took, the machine's idle time is what the
# lanes leave unused, whatever they run.
par=${TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}
[ "$par" -ge 1 ] 2>/dev/null || par=1
[ -n "${TEST_JOBS:-}" ] || [ "$par" -le 2 ] || par=2
pass=0 fail=0 skip=0 cpu_sum=0 t_start=$SECONDS
failed=() why=()
export OMP_WAIT_POLICY=PASSIVE
# OpenBLAS's kernels as scaletrain chooses them (src/core/blas.h: where
# OpenBLAS takes the CPU for an older one, scaletrain starts itself again
# with the CPU's own), set once here so that the test programs run them too
# and no scaletrain process starts twice; tests/e2e/blas_core.sh clears it
# to check the choice itself.
if [ -z "${OPENBLAS_CORETYPE:-}" ] && [ -x "$build/scaletrain" ]; then
    core=$(OPENBLAS_VERBOSE=2 "$build/scaletrain" help 2>&1 >/dev/null | sed -n 's/^Core: //p' | tail -1)
    [ -z "$core" ] || export OPENBLAS_CORETYPE=$core
fi
res=$(mktemp -d /tmp/stXXXXXX) # (short: OpenMPI's session folders go under it, below)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$res"' EXIT
# Each test writes a line to this pipe when it has ended (after its
# outcome's file): the runner waits by reading it, so that no end is
# missed, where `wait -n` sleeps past a job that ended just before it was
# called (until the next one ends).
mkfifo "$res/ends" && exec 3<>"$res/ends"
started=0 running=0 # tests started, and started but not yet reported
# report I: the finished test I's line (and its log's end when it failed)
report() {
    local i=$1 name rc dt cpu
    name=$(cat "$res/$i.name")
    read -r rc dt cpu <"$res/$i.rc"
    cpu_sum=$((cpu_sum + ${cpu:-0}))
    if [ "$dt" -ge 900 ]; then
        echo "(tests/run.sh: ended after ${dt} s: the test's limit is 900 s)" >>"$res/$i.log"
    fi
    if [ "$rc" -eq 0 ]; then
        pass=$((pass + 1)); echo "PASS $name (${dt}s, cpu ${cpu:-0}s)"
    elif [ "$rc" -eq 77 ]; then
        skip=$((skip + 1)); echo "SKIP $name: $(grep -m1 skipped "$res/$i.log" | sed 's/.*skipped: //')"
    else
        fail=$((fail + 1)); failed+=("$name"); echo "FAIL $name (exit $rc)"
        # its first failed check (else its last line), said again at the end: a reader shown the
        # log's start and end only still sees what failed
        why+=("$name: $( (grep -m1 -E '^FAIL[ :]' "$res/$i.log" || tail -n 1 "$res/$i.log") | cut -c1-400)")
        # the failed checks' lines and the seeds that replay them, which a
        # long log prints before its last 40 lines
        if [ "$(wc -l <"$res/$i.log")" -gt 40 ]; then
            head -n -40 "$res/$i.log" | grep -E '^(FAIL[ :]|[A-Z_]*SEED=)' | head -20 | sed 's/^/    (earlier) /'
        fi
        sed 's/^/    /' "$res/$i.log" | tail -40
    fi
    rm -rf "$res/$i".*
    running=$((running - 1))
    light_ids=${light_ids/ $i / }
    [ "$i" != "$serial_i" ] || serial_i=
}
collect() { # report every test that has finished
    local f
    for f in "$res"/*.rc; do
        [ -e "$f" ] || continue
        f=${f##*/}
        report "${f%.rc}"
    done
}
light_ids=" " serial_i= # the light tests running beside the lanes (run_light), and the serial one (serial_start), if any
light_max=${TEST_LIGHT:-2}
extra_max=${TEST_EXTRA:-1}
# idle: true when the machine's CPUs were at least 40% idle over the
# sample that ends now, one of 3 to 5 s (/proc/stat; each call that
# answers starts the next sample, so that a test started on its answer is
# in the next one before another starts; an older sample, from before a
# long wait, starts again; time waiting for I/O counts as busy: a test
# that fsyncs is not to be joined by another)
load_t=0 load_busy=0 load_total=0
idle() {
    local u n s i w q sq st rest busy total
    read -r _ u n s i w q sq st rest </proc/stat 2>/dev/null || return 1
    busy=$((u + n + s + w + q + sq + st)) total=$((u + n + s + i + w + q + sq + st))
    if [ "$load_t" -eq 0 ] || [ $((SECONDS - load_t)) -gt 5 ]; then
        load_t=$SECONDS load_busy=$busy load_total=$total
        return 1
    fi
    [ $((SECONDS - load_t)) -ge 3 ] || return 1
    local db=$((busy - load_busy)) dt=$((total - load_total))
    load_t=$SECONDS load_busy=$busy load_total=$total
    [ "$dt" -gt 0 ] && [ $((100 * (dt - db))) -ge $((40 * dt)) ]
}
lights() { # how many light tests run beside the lanes
    local a=($light_ids)
    echo "${#a[@]}"
}
busy() { # tests running, the light ones beside the lanes not counted
    echo $((running - $(lights)))
}
next_end() { # [SECONDS]: wait until a test ends (at most SECONDS, default 60), and report every one that has
    # (no end and no test's process left: a test whose process ended
    # without its outcome's file, which would else be waited for forever,
    # fails, said)
    if ! read -r -t "${1:-60}" -u 3 _ && [ -z "$(jobs -rp)" ]; then
        local f
        for f in "$res"/*.name; do
            [ -e "$f" ] && [ ! -e "${f%.name}.rc" ] || continue
            echo "(tests/run.sh: the test's process ended without its outcome)" >>"${f%.name}.log"
            echo "1 0 0" >"${f%.name}.rc"
        done
    fi
    collect
}
settle() { # wait until fewer than N tests run (N=1: none), every serial test started
    while :; do
        serial_start
        [ "$running" -ge "$1" ] || [ "$serial_next" -lt "${#serial_tests[@]}" ] || break
        next_end
    done
    collect
}
lane() { # wait until fewer than $par tests run (a light one besides), or an extra lane opens
    while :; do
        serial_start
        [ "$(busy)" -ge "$par" ] || break
        # (not while a serial test waits for a lane: it takes the next one free)
        if [ "$(busy)" -lt $((par + extra_max)) ] &&
            { [ "$serial_next" -ge "${#serial_tests[@]}" ] || [ -n "$serial_i" ]; }; then
            ! idle || break
            next_end 1 # (the machine looked at again each second)
        else
            next_end
        fi
    done
    collect
}
run() { # name command...: in the background, at most $par at once (a light one besides)
    local name=$1; shift
    local i=$((started += 1))
    lane
    start "$i" "$name" "$@"
}
run_light() { # name command...: beside $par others, or in a free lane
    local name=$1; shift
    local i=$((started += 1))
    while :; do # ($light_max light ones running: this one takes a lane)
        serial_start
        [ "$(lights)" -ge "$light_max" ] && [ "$(busy)" -ge "$par" ] || break
        next_end
    done
    collect
    start "$i" "$name" "$@"
    [ "$(lights)" -ge "$light_max" ] || light_ids="$light_ids$i " # (else in a free lane: one of $par)
}
run_one() { # i name command...: in the foreground, its outcome in $res/i.rc
    local i=$1 name=$2; shift 2
    echo "$name" >"$res/$i.name"
    local t0=$SECONDS
    # Each test's OpenMPI session folders in a folder of its own: the last
    # mpirun out of /tmp/ompi.HOST.UID removes it, and another test's
    # mpirun creating its own folder in it that moment fails with
    # "orte_session_dir failed" (seen once in CI).
    mkdir -p "$res/$i.o"
    # at most 15 minutes a test (the slowest takes under two): a test
    # that hangs fails, named, instead of holding the suite to CI's own
    # limit
    OMPI_MCA_orte_tmpdir_base=$res/$i.o timeout -k 30 900 "$@" >"$res/$i.log" 2>&1 </dev/null 3>&-
    local rc=$?
    # the CPU the test's processes took (user + system), for its line:
    # the suite's time on 2 cores is the sum of these, where the tests
    # fill both (`times`' second line: this subshell's waited-for children)
    local cpu
    times >"$res/$i.times"
    cpu=$(awk 'NR == 2 { t = 0; for (f = 1; f <= 2; f++) { split($f, a, /[ms]/); t += a[1] * 60 + a[2] } printf "%.0f", t }' "$res/$i.times")
    echo "$rc $((SECONDS - t0)) ${cpu:-0}" >"$res/$i.rc.tmp"
    mv "$res/$i.rc.tmp" "$res/$i.rc"
    echo "$i" >&3
}
start() { # i name command...: in the background
    running=$((running + 1))
    run_one "$@" &
}
# The end-to-end tests whose script holds "# tests/run.sh: serial" (a
# SLURM test cluster at a time): each started, as a test of its own, when
# the one before it has ended and a lane is free, whenever the runner looks
# (serial_start), so that they take a lane one after another beside the
# rest.
serial_names=() serial_tests=() serial_next=0
serial_start() { # the next serial test, when none runs and a lane is free
    [ "$serial_next" -lt "${#serial_tests[@]}" ] || return 0
    [ -z "$serial_i" ] || return 0
    [ "$(busy)" -lt "$par" ] || return 0
    local k=$serial_next
    serial_next=$((k + 1))
    start "$((started += 1))" "${serial_names[k]}" "${serial_tests[k]}" "$build"
    serial_i=$started
}
# ST_TEST_ANALYZE=1 (scripts/test.sh): clang's static analyzer over the
# sources (make analyze; a report fails it) first, in one lane beside the
# tests, whose waits it fills
[ -z "${ST_TEST_ANALYZE:-}" ] || run "analyze" make --no-print-directory -j1 analyze
# The longest tests first (the end-to-end ones whose scripts hold "#
# tests/run.sh: long", a minute or more; then the emulator's and
# ThreadSanitizer's), the other end-to-end ones next and the many short
# unit tests last, so that the lanes end together rather than one running
# a long test alone at the end. tests/e2e/emu_*.sh need the
# emulator's build (they skip, saying so, without one).
for t in tests/e2e/*.sh; do # the serial ones first (serial_start; one not executable fails below)
    [ -x "$t" ] && grep -qx "# tests/run.sh: serial.*" "$t" || continue
    serial_names+=("e2e/$(basename "$t" .sh)") serial_tests+=("$t")
done
e2e() { # script: start it, as its marks say
    local t=$1 how=run
    grep -qx "# tests/run.sh: light.*" "$t" && how=run_light
    case "$(basename "$t")" in
    emu_*) $how "e2e/$(basename "$t" .sh)" "$t" "${emu:-$build}" ;;
    *) $how "e2e/$(basename "$t" .sh)" "$t" "$build" ;;
    esac
}
for t in tests/e2e/*.sh; do
    [ -x "$t" ] && grep -qx "# tests/run.sh: long.*" "$t" && ! grep -qx "# tests/run.sh: serial.*" "$t" && e2e "$t"
done
if [ -n "$emu" ]; then
    for t in "$emu"/tests/test_*; do
        [ -x "$t" ] && [ "${t%.d}" = "$t" ] || continue
        run "emu/$(basename "$t")" "$t"
    done
    # The kernels' tests again under the emulator's adversary: each round of
    # a block's threads in a random order, one warp held back or let run
    # ahead between barriers, blocks in a random order (tests/cudaemu/README.md),
    # so that a missing barrier changes the results. A new seed each run,
    # in the test's name: ST_CUDAEMU_SCHED=adversary ST_CUDAEMU_SCHED_SEED=N
    # repeats it.
    seed=${ST_CUDAEMU_SCHED_SEED:-$(( (RANDOM << 15) | RANDOM ))}
    for t in test_cuda_half test_cuda_layers_a test_cuda_layers_b test_cuda_loss test_cuda_models test_cuda_optim \
        test_cuda_train; do
        [ -x "$emu/tests/$t" ] || continue
        run "emu-adversary/$t (seed $seed)" env ST_CUDAEMU_SCHED=adversary ST_CUDAEMU_SCHED_SEED=$seed "$emu/tests/$t"
    done
fi
[ -z "$tsan" ] || run "tsan" tests/tsan.sh "$tsan"
for t in tests/e2e/*.sh; do
    if [ ! -x "$t" ]; then # a test that would silently never run
        fail=$((fail + 1)); failed+=("e2e/$(basename "$t" .sh)"); why+=("e2e/$(basename "$t" .sh): not executable")
        echo "FAIL e2e/$(basename "$t" .sh): $t is not executable (chmod +x, and commit the mode)"
        continue
    fi
    grep -qx "# tests/run.sh: \(serial\|long\).*" "$t" || e2e "$t"
done
for t in "$build"/tests/test_*; do
    [ -x "$t" ] && [ "${t%.d}" = "$t" ] || continue
    run "$(basename "$t")" "$t"
done
if [ -n "$asan" ]; then
    # The sanitizer build runs the unit tests; the PyTorch parity test is the
    # slow one and gains nothing from it. (The options go with each test,
    # not the runner's environment: a serial test the runner starts
    # meanwhile must not inherit them.)
    for t in "$asan"/tests/test_*; do
        [ -x "$t" ] && [ "${t%.d}" = "$t" ] || continue
        case "$(basename "$t")" in test_parity) continue ;; esac
        run "asan/$(basename "$t")" env ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 "$t"
    done
fi
for t in tests/py/test_*.py; do
    [ -f "$t" ] || continue
    run "py/$(basename "$t" .py)" /usr/bin/python3 "$t" "$build"
done
settle 1
if ((${#failed[@]})); then
    echo "failed: ${failed[*]}"
    printf '    %s\n' "${why[@]}"
fi
echo "$pass passed, $fail failed, $skip skipped ($((SECONDS - t_start)) s; the tests' processes took ${cpu_sum} s of CPU)"
[ $fail -eq 0 ]
