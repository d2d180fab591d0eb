#!/bin/bash
# mpirun's remote shell (--mca plm_rsh_agent) for hosts that are network
# namespaces on this machine: host a.b.c.K runs in namespace
# ${CLAW_NS_PREFIX}hK, with that host name of its own (Open MPI keys its
# shared-memory files by host name). Used by tests/e2e/parallel/elastic.sh and
# tests/e2e/net/dc_net.sh.
while [[ $1 == -* ]]; do shift; done
host=$1; shift
exec ip netns exec "${CLAW_NS_PREFIX}h${host##*.}" unshare --uts sh -c "hostname ${CLAW_NS_PREFIX}h${host##*.}; $*"
