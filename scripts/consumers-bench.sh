#!/bin/bash
# consumers-bench.sh: the figures of docs/PERFORMANCE.md "UCX, Open MPI and libfabric beside
# snic-perf": one snicd (core 0, idle backoff 20), server processes on core 0, clients on
# core 1. Run as root after scripts/setup.sh; prints each pair's result lines.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/lib.sh
M=$(snic_eal_mem_args)
D=/tmp/pf; mkdir -p $D; rm -f $D/*.sock
B=build; R=$B/libclient/snic-run; P=$B/tools/perf/snic-perf
taskset -c 0 $B/daemon/snicd -l 0 --no-pci $M -- --name pf --ctrl $D/pf.sock --wire --port wire0,ip=198.18.70.1/24 --port wire1,ip=198.18.70.2/24 --idle-backoff 20 > $D/d.log 2>&1 &
DPID=$!
for i in $(seq 1 50); do [ -S $D/pf.sock ] && break; sleep 0.2; done
export SNIC_SOCKET_DIR=$D
pair() {  # pair NAME SERVERCMD... -- CLIENTCMD...
  local name=$1; shift; local s=(); while [ "$1" != "--" ]; do s+=("$1"); shift; done; shift
  taskset -c 0 "${s[@]}" > $D/srv.log 2>&1 &
  local sp=$!; sleep 1.5
  echo "== $name"; taskset -c 1 timeout 120 "$@" 2>&1 | grep -v '^ *\[' | tail -"${TAILN:-2}"
  sleep 0.5; kill -9 $sp 2>/dev/null; wait $sp 2>/dev/null
}
pair "snic-perf send_lat 8" $R $P send_lat -s 8 -n 20000 -d pf_0 -p 18600 -- $R $P send_lat -s 8 -n 20000 -d pf_1 -p 18600 127.0.0.1
pair "snic-perf write_lat 8" $R $P write_lat -s 8 -n 20000 -d pf_0 -p 18601 -- $R $P write_lat -s 8 -n 20000 -d pf_1 -p 18601 127.0.0.1
pair "snic-perf write_bw 64K" $R $P write_bw -s 65536 -n 5000 -d pf_0 -p 18602 -- $R $P write_bw -s 65536 -n 5000 -d pf_1 -p 18602 127.0.0.1
export UCX_TLS=rc_verbs,ud_verbs
for t in "tag_lat 8 20000" "ucp_put_lat 8 20000" "tag_bw 65536 5000" "ucp_get 65536 5000"; do
  set -- $t
  pair "ucx_perftest $1 $2" env UCX_NET_DEVICES=pf_0:1 $R ucx_perftest -p 17500 -- env UCX_NET_DEVICES=pf_1:1 $R ucx_perftest 127.0.0.1 -p 17500 -t $1 -s $2 -n $3
done
unset UCX_TLS
mpicc -O2 -o $D/mpi_check tests/mpi/mpi_check.c
echo "== mpi_check (pml ucx)"
timeout 200 mpirun --allow-run-as-root --oversubscribe --mca pml ucx --mca osc ucx --mca btl self -x SNIC_SOCKET_DIR -x UCX_TLS=rc_verbs,ud_verbs -np 1 env SNIC_DEVICES=pf_0 UCX_NET_DEVICES=pf_0:1 taskset -c 0 $R $D/mpi_check : -np 1 env SNIC_DEVICES=pf_1 UCX_NET_DEVICES=pf_1:1 taskset -c 1 $R $D/mpi_check 2>&1 | tail -1
NS=pfns; ip netns del $NS 2>/dev/null; ip netns add $NS; ip -n $NS link set lo up
ip -n $NS addr add 198.18.70.1/32 dev lo; ip -n $NS addr add 198.18.70.2/32 dev lo
for e in msg rdm; do
  TAILN=3 pair "fi_pingpong $e 8 B" ip netns exec $NS env SNIC_DEVICES=pf_0 $R fi_pingpong -p verbs -e $e -I 20000 -S 8 -B 47700 -- ip netns exec $NS env SNIC_DEVICES=pf_1 $R fi_pingpong -p verbs -e $e -I 20000 -S 8 -P 47700 198.18.70.1
done
ip netns del $NS
kill $DPID; wait $DPID 2>/dev/null
