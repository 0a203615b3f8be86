#!/usr/bin/env bash
# Two nodes on one machine: two network namespaces joined by a veth pair, each
# with its own address and host name, and mpirun starting one rank in each
# over TCP (a launch agent stands in for ssh). The two-node run of a small
# mlp must save the same weights as two ranks on one node and as one rank
# with the same global batch (tolerance as in ddp_equivalence.sh: 1e-4), and
# `scaletrain launch --hosts` across the two nodes must train the same, and
# stopped by SIGTERM, checkpoint and exit 143. Three ranks on nodes of 2 and
# 1 must train as one rank with the same batch.
#
# Needs root and network namespaces (`ip netns`); where the machine does not
# allow them (an unprivileged container) the test skips and says so.
source "$(dirname "$0")/../lib/e2e.sh"
bin=$(realpath "$build/scaletrain")
e2e_need_mpirun
command -v ip >/dev/null || e2e_skip "ip is missing (apt-get install iproute2)"
e2e_need_fmnist
e2e_need_numpy

# Names unique to this run, so two test runs on one machine do not collide.
tag=st$$
n0=${tag}n0 n1=${tag}n1 v0=${tag}a v1=${tag}b
e2e_tmpdir
e2e_cleanup() {
    ip netns del "$n0" 2>/dev/null
    ip netns del "$n1" 2>/dev/null
}
ip netns add "$n0" 2>"$tmp/err" || e2e_skip "cannot create network namespaces here: $(cat "$tmp/err")"
ip netns add "$n1" || e2e_skip "cannot create a second network namespace"
ip link add "$v0" type veth peer name "$v1" 2>"$tmp/err" || e2e_skip "cannot create a veth pair: $(cat "$tmp/err")"
ip link set "$v0" netns "$n0" && ip link set "$v1" netns "$n1" &&
    ip -n "$n0" addr add 10.77.0.1/24 dev "$v0" && ip -n "$n1" addr add 10.77.0.2/24 dev "$v1" &&
    ip -n "$n0" link set "$v0" up && ip -n "$n1" link set "$v1" up &&
    ip -n "$n0" link set lo up && ip -n "$n1" link set lo up || {
    echo "FAIL: setting up the veth pair between $n0 and $n1"
    exit 1
}

# The launch agent: mpirun calls it as `agent HOST COMMAND...` to start its
# daemon on HOST; it runs the command inside that host's namespace with the
# host's own name (a UTS namespace), as ssh would on a real node.
cat >"$tmp/agent.sh" <<EOF
#!/bin/sh
host=\$1; shift
case "\$host" in
10.77.0.1) ns=$n0; name=node0 ;;
10.77.0.2) ns=$n1; name=node1 ;;
*) echo "agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$name; \$*"
EOF
chmod +x "$tmp/agent.sh"
printf '10.77.0.1 slots=1\n10.77.0.2 slots=1\n' >"$tmp/hosts"
printf '10.77.0.1 slots=2\n10.77.0.2 slots=1\n' >"$tmp/hosts3"
# on_nodes SECONDS COMMAND...: mpirun itself runs on node0 (and starts
# node0's rank there), bounded by SECONDS. NP and HOSTS: 3 ranks, 2 on
# node0 and 1 on node1.
on_nodes() {
    local secs=$1; shift
    ip netns exec "$n0" unshare --uts sh -c 'hostname node0; exec "$@"' sh \
        timeout "$secs" mpirun --allow-run-as-root -np "${NP:-2}" --hostfile "${HOSTS:-$tmp/hosts}" \
        --mca plm_rsh_agent "$tmp/agent.sh" \
        --bind-to none --mca btl self,tcp --mca btl_tcp_if_include 10.77.0.0/24 \
        --mca oob_tcp_if_include 10.77.0.0/24 "$@"
}

export OMP_WAIT_POLICY=PASSIVE
args=(train --set model.type=mlp --set model.hidden=[64,32] --set train.steps=20 --set train.batch_size=32
      --set train.threads=1 --set data.num_workers=0 --set data.val= --set dist.timeout_s=30
      --set dist.bucket_cap_mb=0.01 --set optim.type=sgd --set optim.lr=0.05 --set optim.momentum=0.9
      --set optim.schedule=constant --json --quiet)

timeout 60 "$bin" "${args[@]}" --set train.out_dir="$tmp/n1" >"$tmp/n1.json" || fail "1 rank: $(cat "$tmp/n1.json")"
timeout 60 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 "$bin" "${args[@]}" \
    --set train.out_dir="$tmp/local2" >"$tmp/local2.json" || fail "2 ranks on one node: $(cat "$tmp/local2.json")"
on_nodes 90 "$bin" "${args[@]}" --set train.out_dir="$tmp/nodes2" >"$tmp/nodes2.json" 2>"$tmp/nodes2.err" ||
    fail "2 ranks on two nodes: $(cat "$tmp/nodes2.json" "$tmp/nodes2.err")"

# Nodes with different numbers of ranks (2 and 1): each rank plans the
# run's 3 ranks, not its node's count times the nodes (4 on node0, where a
# batch of 30 does not split: that rank skipped the planner's agreement and
# the others waited in it), and the run trains as one rank with the batch.
timeout 60 "$bin" "${args[@]}" --set train.batch_size=30 --set train.out_dir="$tmp/n1b30" >"$tmp/n1b30.json" ||
    fail "1 rank, batch 30: $(cat "$tmp/n1b30.json")"
NP=3 HOSTS="$tmp/hosts3" on_nodes 90 "$bin" "${args[@]}" --set train.batch_size=30 \
    --set train.out_dir="$tmp/uneven" >"$tmp/uneven.json" 2>"$tmp/uneven.err" ||
    fail "3 ranks on nodes of 2 and 1: $(grep scaletrain: "$tmp/uneven.err" | head -5)"
grep -q '"ranks":3' "$tmp/uneven.json" || fail "nodes of 2 and 1 ranks: not 3 ranks: $(cat "$tmp/uneven.json")"
echo -n "3 ranks on nodes of 2 and 1 against 1 rank: "
/usr/bin/python3 tests/py/weights_diff.py "$tmp/n1b30/model.safetensors" "$tmp/uneven/model.safetensors" 1e-4 ||
    fail "3 ranks on nodes of 2 and 1 differ from 1 rank"

# The run really spanned two hosts: the ranks' host names as the run saw them.
/usr/bin/python3 - "$tmp/nodes2.json" <<'PY' || fail "the two-node run's --json line"
import json, math, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
ok = r["ranks"] == 2 and r["steps"] == 20 and math.isfinite(r["loss"])
print("two nodes:", "ok" if ok else "FAIL", {k: r[k] for k in ("ranks", "steps", "loss")})
sys.exit(0 if ok else 1)
PY
hosts=$(on_nodes 60 hostname 2>&1 | sort | tr '\n' ' ')
[ "$hosts" = "node0 node1 " ] || fail "the ranks ran on '$hosts', expected node0 and node1"
echo "ranks ran on: $hosts"

# `scaletrain launch --hosts` across the two nodes, as a user would start it
# on node0: the agent and the TCP settings come from the environment
# (OMPI_MCA_*, as in a job script); the launcher adds --host and its own
# options. Rank 1's output comes back from node1 behind "[rank 1] ".
on_node0_env() {
    local secs=$1; shift
    ip netns exec "$n0" unshare --uts sh -c 'hostname node0; exec "$@"' sh env \
        OMPI_MCA_plm_rsh_agent="$tmp/agent.sh" OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=10.77.0.0/24 \
        OMPI_MCA_oob_tcp_if_include=10.77.0.0/24 timeout "$secs" "$@"
}
out=$(on_node0_env 60 "$bin" launch -n 2 --hosts 10.77.0.1:1,10.77.0.2:1 hostname 2>&1)
# two processes' lines: rank 0's own and rank 1's relayed with its prefix, in either order
[ "$(sort <<<"$out")" = "$(printf '[rank 1] node1\nnode0' | sort)" ] || fail "launch --hosts hostname: $out"
echo "launch --hosts: $(tr '\n' ' ' <<<"$out")"
on_node0_env 90 "$bin" launch -n 2 --hosts 10.77.0.1:1,10.77.0.2:1 "${args[@]}" --set train.out_dir="$tmp/launch2" \
    >"$tmp/launch2.json" 2>"$tmp/launch2.err" || fail "launch --hosts: $(cat "$tmp/launch2.json" "$tmp/launch2.err")"
grep -q '"ranks":2' "$tmp/launch2.json" || fail "launch --hosts: not 2 ranks: $(cat "$tmp/launch2.json")"
echo -n "launch --hosts against mpirun on the two nodes: "
/usr/bin/python3 tests/py/weights_diff.py "$tmp/nodes2/model.safetensors" "$tmp/launch2/model.safetensors" 1e-6 ||
    fail "launch --hosts differs from mpirun on the two nodes"

# SIGTERM to `launch --hosts` (pre-emption): the ranks on both nodes save a
# checkpoint and the job exits 143. The launcher signals only its ranks: the
# agent that started node1's daemon (ssh) signalled too made mpirun abort
# the job mid-save (exit 15, nothing saved).
# term_launcher NAME READY...: SIGTERM to the launcher started in the
# background ($lpid) with train.out_dir $tmp/NAME, once the command READY
# succeeds (up to 60 s); rc: the launcher's exit status.
term_launcher() {
    local name=$1 launcher
    shift
    for _ in $(seq 1 600); do "$@" && break; sleep 0.1; done
    # (the launcher itself, not the shell running on_node0_env)
    launcher=$(pgrep -f -- "$bin launch -n 2 --hosts .*$tmp/$name")
    [ -n "$launcher" ] && kill -TERM $launcher || fail "SIGTERM to launch ($name): no launcher found"
    wait $lpid
    rc=$?
}
on_node0_env 120 "$bin" launch -n 2 --hosts 10.77.0.1:1,10.77.0.2:1 "${args[@]}" --set train.steps=1000000 \
    --set train.checkpoint_every=0 --set train.out_dir="$tmp/term2" >"$tmp/term2.out" 2>"$tmp/term2.err" &
lpid=$!
term_launcher term2 test -s "$tmp/term2/metrics.jsonl"
[ $rc -eq 143 ] && [ -s "$tmp/term2/ckpt/latest" ] ||
    fail "SIGTERM to launch --hosts: exit $rc, checkpoint '$(cat "$tmp/term2/ckpt/latest" 2>/dev/null)': $(tail -5 "$tmp/term2.err")"
echo "SIGTERM to launch --hosts: exit $rc, checkpoint $(cat "$tmp/term2/ckpt/latest" 2>/dev/null)"

# The same with no rank on the launcher's host (both on node1): no rank here
# to signal, so the stop goes through mpirun as SIGUSR1, which it passes on
# to the ranks (SIGTERM to mpirun kills them mid-save, and the launcher said
# "nothing ran"): a checkpoint, exit 143, no such line. An environment
# variable set here reaches them too (mpirun -x; the agent here, unlike
# ssh, hands node1's daemon its own environment as well, so this shows only
# that the -x options do no harm). Under --quiet no rank speaks until the
# stop's own line: the launcher passed SIGUSR1 on again every 2 s until then,
# and once after it, which killed mpirun as it ended (exit 138; 2 runs in 5).
on_node0_env 120 env ST_NETNS_PROBE=from-node0 "$bin" launch -n 2 --hosts 10.77.0.2:2 "${args[@]}" \
    --set train.steps=1000000 --set train.checkpoint_every=0 --set train.out_dir="$tmp/remote2" \
    >"$tmp/remote2.out" 2>"$tmp/remote2.err" &
lpid=$!
term_launcher remote2 test -s "$tmp/remote2/metrics.jsonl"
[ $rc -eq 143 ] && [ -s "$tmp/remote2/ckpt/latest" ] && ! grep -q "nothing ran" "$tmp/remote2.err" ||
    fail "SIGTERM to launch with no rank here: exit $rc, checkpoint '$(cat "$tmp/remote2/ckpt/latest" 2>/dev/null)': $(tail -5 "$tmp/remote2.err")"
echo "SIGTERM to launch with both ranks on node1: exit $rc, checkpoint $(cat "$tmp/remote2/ckpt/latest" 2>/dev/null)"
# The same with an mpirun that passes no signal on (ess_base_forward_signals
# none) and ranks that print their steps: the stop is held while mpirun
# does not catch SIGUSR1, then, 2 s on, goes to mpirun itself as the SIGTERM
# received, which ends the job (said), rather than the job training on.
loud=()
for a in "${args[@]}"; do [ "$a" = --quiet ] || [ "$a" = --json ] || loud+=("$a"); done
on_node0_env 120 env OMPI_MCA_ess_base_forward_signals=none "$bin" launch -n 2 --hosts 10.77.0.2:2 "${loud[@]}" \
    --set train.steps=1000000 --set train.checkpoint_every=0 --set log.progress=off --set log.every=50 \
    --set train.out_dir="$tmp/nofwd" >"$tmp/nofwd.out" 2>"$tmp/nofwd.err" &
lpid=$!
term_launcher nofwd grep -q "^\[rank 0\] step\|^step " "$tmp/nofwd.out"
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "mpirun does not pass SIGUSR1 on to the ranks (no rank runs here to stop): signal 15 sent to mpirun" "$tmp/nofwd.err" ||
    fail "SIGTERM to launch, mpirun passing nothing on: exit $rc: $(tail -3 "$tmp/nofwd.err")"
echo "SIGTERM to launch, mpirun passing nothing on: exit $rc, the job ended by mpirun, said"
out=$(on_node0_env 60 env ST_NETNS_PROBE=from-node0 "$bin" launch -n 2 --hosts 10.77.0.2:2 sh -c 'echo "probe=$ST_NETNS_PROBE"' 2>&1)
[ "$(grep -c "probe=from-node0" <<<"$out")" = 2 ] || fail "launch --hosts: the environment did not reach node1's ranks: $out"

for r in local2 nodes2; do
    echo -n "$r against 1 rank: "
    /usr/bin/python3 tests/py/weights_diff.py "$tmp/n1/model.safetensors" "$tmp/$r/model.safetensors" 1e-4 ||
        fail "$r differs from 1 rank"
done
echo -n "two nodes against two ranks on one node: "
/usr/bin/python3 tests/py/weights_diff.py "$tmp/local2/model.safetensors" "$tmp/nodes2/model.safetensors" 1e-6 ||
    fail "two nodes differ from two ranks on one node"
e2e_finish ok
