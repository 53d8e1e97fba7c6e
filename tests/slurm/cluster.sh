#!/usr/bin/env bash
# A single-node SLURM cluster on localhost for tests (Debian slurm-wlm + munge, run as root).
#   tests/slurm/cluster.sh start   -> writes /etc/slurm/{slurm,gres}.conf, starts munged, slurmctld, slurmd
#   tests/slurm/cluster.sh stop    -> stops the daemons this script started and puts /etc/slurm back as it was
# A slurm.conf left behind with no controller running costs every later `snakemake` call ~9 s: the SLURM executor
# plugin runs `scontrol show config` when it is imported, and that waits for its timeout.
# The node advertises fake GPUs (gres on /dev/null, and /dev/zero where it has two CPUs) so that jobs requesting
# --gpus=1 schedule, as many at once as it has CPUs, up to two.
set -euo pipefail
run=/run/fedrepro-slurm
host=$(hostname)
case "${1:-}" in
start)
  for b in munged slurmctld slurmd sinfo; do command -v "$b" >/dev/null || { echo "missing $b"; exit 3; }; done
  [ "$(id -u)" = 0 ] || { echo "needs root"; exit 3; }
  if sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then echo "SLURM already running"; exit 0; fi
  mkdir -p "$run" /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge /var/lib/munge /var/log/munge
  [ -s /etc/munge/munge.key ] || { mkdir -p /etc/munge; dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null; }
  chmod 400 /etc/munge/munge.key
  for f in slurm.conf gres.conf; do
    if [ -e "/etc/slurm/$f" ] && [ ! -e "$run/$f.orig" ]; then cp -p "/etc/slurm/$f" "$run/$f.orig"; fi
  done
  mem=$(awk '/MemTotal/ {print int($2/1024) - 1024}' /proc/meminfo)
  [ "$mem" -gt 16000 ] && mem=16000
  gpus=1; if [ "$(nproc)" -gt 1 ]; then gpus=2; fi
  cat > /etc/slurm/slurm.conf <<CONF
ClusterName=fedrepro
SlurmctldHost=${host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MinJobAge=300
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=$run/slurmctld.pid
SlurmdPidFile=$run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ReturnToService=2
GresTypes=gpu
NodeName=${host} NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=${mem} Gres=gpu:${gpus} State=UNKNOWN
PartitionName=debug Nodes=${host} Default=YES MaxTime=INFINITE State=UP
CONF
  echo "NodeName=${host} Name=gpu File=/dev/null" > /etc/slurm/gres.conf
  if [ "$gpus" = 2 ]; then echo "NodeName=${host} Name=gpu File=/dev/zero" >> /etc/slurm/gres.conf; fi
  munged --force --pid-file="$run/munged.pid"
  slurmctld
  slurmd
  touch "$run/started"  # stop only what this script started
  for _ in $(seq 60); do
    sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed)' && { sinfo; exit 0; }
    sleep 1
  done
  echo "the node did not become idle"; sinfo || true; tail -20 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log || true
  exit 4
  ;;
stop)
  [ -f "$run/started" ] || exit 0
  rm -f "$run/started"
  for d in slurmd slurmctld munged; do
    [ -f "$run/$d.pid" ] && kill "$(cat "$run/$d.pid")" 2>/dev/null || true
  done
  sleep 1
  for f in slurm.conf gres.conf; do
    if [ -e "$run/$f.orig" ]; then mv -f "$run/$f.orig" "/etc/slurm/$f"; else rm -f "/etc/slurm/$f"; fi
  done
  ;;
*) echo "usage: $0 start|stop"; exit 2 ;;
esac
