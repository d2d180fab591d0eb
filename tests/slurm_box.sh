#!/usr/bin/env bash
# Slurm on this one machine, for tests (RECIPES.md "Slurm on one machine"):
# sourced, it starts munged, slurmctld and slurmd under a private directory
# $D with free ports, exports SLURM_CONF, waits for the node to be idle, and
# stops the daemons (by the pids they wrote) when the shell exits. It
# defines fail MESSAGE (prints the daemons' logs and $D/srun.out, exits 1).
# Needs the Debian packages slurm-wlm and munge (scripts/setup installs them).
for tool in munged mungekey slurmctld slurmd srun sinfo; do
  command -v $tool >/dev/null || { echo "FAIL: $tool not found (install slurm-wlm and munge: scripts/setup)"; exit 1; }
done

D=$(mktemp -d /tmp/claw-slurm.XXXXXX)
stop() {
  local f pid
  for f in "$D/slurmd.pid" "$D/slurmctld.pid" "$D/munged.pid"; do
    [[ -s $f ]] || continue
    pid=$(<"$f")
    kill "$pid" 2>/dev/null || continue
    # Wait for it to be gone (or a zombie: PID 1 here reaps late).
    for _ in $(seq 50); do
      [[ -r /proc/$pid/stat ]] || break
      [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) == Z ]] && break
      sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
  done
  rm -rf "$D"
}
trap stop EXIT
fail() {
  echo "FAIL: $*"
  for log in srun.out slurmctld.log slurmd.log munged.log; do
    [[ -f $D/$log ]] && { echo "---- $log (last 30 lines)"; tail -30 "$D/$log"; }
  done
  exit 1
}

# Two free TCP ports for the controller and the node daemon.
read -r ctld_port slurmd_port < <(python3 - <<'EOF'
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])
EOF
)
[[ -n ${slurmd_port:-} ]] || fail "could not pick free ports"

host=$(hostname -s)
mkdir -p "$D/state" "$D/spool"
mungekey -c -k "$D/munge.key" >/dev/null 2>&1 || fail "mungekey failed"
munged --force --key-file="$D/munge.key" --socket="$D/munge.socket" --pid-file="$D/munged.pid" \
  --log-file="$D/munged.log" --seed-file="$D/munged.seed" || fail "munged did not start"

cat >"$D/slurm.conf" <<EOF
ClusterName=claw
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=$(id -un)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$D/munge.socket
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=pmix
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
SlurmdParameters=config_overrides
ReturnToService=2
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/slurmctld.log
SlurmdLogFile=$D/slurmd.log
NodeName=$host NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES OverSubscribe=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$D/slurm.conf

slurmctld -f "$SLURM_CONF" || fail "slurmctld did not start"
slurmd -f "$SLURM_CONF" || fail "slurmd did not start"
state=""
for _ in $(seq 100); do
  state=$(timeout 2 sinfo -h -N -o %T 2>/dev/null | head -1)
  [[ $state == idle ]] && break
  sleep 0.2
done
[[ $state == idle ]] || fail "node not idle after 20 s (state '$state')"

