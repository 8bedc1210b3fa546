#!/usr/bin/env bash
# Runs one multi-process JAX job on this machine: NUM_PROCESSES copies of `python main.py ARGS...`
# joined through a coordinator on 127.0.0.1 (a free port), as on a pod but over loopback. Checks
# multi-process behaviour (data sharding, checkpoints, process-0-only writes) without a cluster.
#
#   launch/local.sh [OPTIONS] NUM_PROCESSES -- [ARGS...]
#   launch/local.sh 2 -- --config=configs/listops_spt.py:smoke --workdir=/tmp/spt_2proc
#
# Options:
#   --dry-run        print the NUM_PROCESSES commands (with their environment), run nothing
#   --port=PORT      coordinator port (default: a free one)
#   --pin[=CORES]    confine process i to the i-th of NUM_PROCESSES equal, disjoint sets of CORES
#                    ('0-3', '0,2'; default: the cores this script may use), passed to it as
#                    --cores=SET (main.py's flag); `main.py --cpu_processes` launches this way
#   --script=FILE    Python file to run instead of main.py (same ARGS, same environment)
#   -h, --help       this text
#
# Each process gets SPT_JAX_INIT=1, SPT_JAX_COORDINATOR=127.0.0.1:PORT, SPT_JAX_NUM_PROCESSES and
# its own SPT_JAX_PROCESS_ID (0..NUM_PROCESSES-1), which spt_jax/distributed.py reads, and
# SPT_JAX_STOP_WITH_LAUNCHER=1: should this script die (even of SIGKILL), each gets SIGTERM. Its stdout
# and stderr lines are prefixed with "[ID] ". On CPU each process has one device unless XLA_FLAGS
# says otherwise (--xla_force_host_platform_device_count=K: NUM_PROCESSES*K devices in all).
#
# Environment:
#   PYTHON                interpreter (default: python, or python3 if there is no python)
#   DRY_RUN=1             same as --dry-run
#   SPT_JAX_PORT          same as --port
#   SPT_JAX_INIT_TIMEOUT  seconds each process waits for the others to connect (JAX: 300)
#   KILL_GRACE            seconds from SIGTERM to SIGKILL when stopping processes (default 30: a
#                         stopped run saves its latest checkpoint first)
#
# Exit status: 0 if every process succeeded, else the first failing process's status. When one
# process fails the others are stopped (they would otherwise wait in the next collective until
# JAX's heartbeat timeout). SIGINT, SIGTERM and SIGHUP reach every process as SIGTERM (background
# processes of a script ignore SIGINT); main.py then saves its latest checkpoint at the step all
# processes agree on (JAX's preemption sync point) and exits 0, and so does this script once every
# process has: the same command resumes. A process still running KILL_GRACE seconds after the
# signal is killed, and the status is then that process's (137), as for any that failed.
set -euo pipefail

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }

die() { echo "local.sh: $*" >&2; exit 2; }

repo_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dry_run="${DRY_RUN:-0}"
port="${SPT_JAX_PORT:-}"
script="$repo_dir/main.py"
num_processes=""
pin=0
pin_cores=""

while (($#)); do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --dry-run) dry_run=1; shift ;;
    --port=*) port="${1#*=}"; shift ;;
    --pin) pin=1; shift ;;
    --pin=*) pin=1; pin_cores="${1#*=}"; shift ;;
    --script=*) script="${1#*=}"; shift ;;
    --) shift; break ;;
    -*) die "unknown option $1 (see --help)" ;;
    *)
      [[ -z "$num_processes" ]] || die "unexpected argument $1: program arguments go after --"
      num_processes="$1"; shift ;;
  esac
done
args=("$@")

[[ -n "$num_processes" ]] || die "NUM_PROCESSES is required (see --help)"
[[ "$num_processes" =~ ^[1-9][0-9]*$ ]] ||
  die "NUM_PROCESSES=$num_processes must be a positive integer"
[[ -f "$script" ]] || die "no such script: $script"
python="${PYTHON:-$(if command -v python >/dev/null; then echo python; else echo python3; fi)}"
if [[ -z "$port" ]]; then
  # Bound and released at once: free now, and process 0's coordinator binds it within seconds.
  port="$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])')"
fi
[[ "$port" =~ ^[0-9]+$ ]] || die "port $port must be a number"
coordinator="127.0.0.1:$port"
slots=()
if ((pin)); then
  # spt_jax.platform.core_slots: the sets the sweep runner gives its processes, all of one size.
  read -r -a slots < <("$python" -c 'import sys
from spt_jax import platform
try:
  cores = platform.parse_cores(sys.argv[2]) if sys.argv[2] else None
except ValueError as e:
  sys.exit(f"local.sh: --pin: {e}")
print(" ".join(",".join(map(str, s)) for s in platform.core_slots(int(sys.argv[1]), cores)))' \
    "$num_processes" "$pin_cores") || true
  ((${#slots[@]} == num_processes)) || die "--pin=$pin_cores: no core sets for $num_processes processes"
fi

command_for() {  # The environment and argv of process $1, one word per array element.
  cmd=(env SPT_JAX_INIT=1 SPT_JAX_STOP_WITH_LAUNCHER=1 "SPT_JAX_COORDINATOR=$coordinator"
       "SPT_JAX_NUM_PROCESSES=$num_processes" "SPT_JAX_PROCESS_ID=$1"
       "$python" "$script" ${args[@]+"${args[@]}"})
  if ((pin)); then cmd+=("--cores=${slots[$1]}"); fi
}

if [[ "$dry_run" == 1 ]]; then
  for ((i = 0; i < num_processes; i++)); do
    command_for "$i"
    printf '%q ' "${cmd[@]:1}"; echo
  done
  exit 0
fi

pids=()
stop_all() {  # SIGTERM to every process still running, SIGKILL after KILL_GRACE seconds.
  local pid left deadline=$((SECONDS + ${KILL_GRACE:-30}))
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  while ((SECONDS < deadline)); do
    left=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && left=1; done
    ((left)) || return 0
    sleep 0.2
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
}

on_signal() {
  echo "local.sh: $1 received; stopping ${#pids[@]} process(es)" >&2
  trap - INT TERM HUP
  stop_all
  local i rc status=0
  for i in "${!pids[@]}"; do
    rc=0
    wait "${pids[$i]}" 2>/dev/null || rc=$?
    if ((rc != 0)); then
      echo "local.sh: process $i exited with status $rc" >&2
      ((status != 0)) || status=$rc
    fi
  done
  wait 2>/dev/null || true
  ((status != 0)) || echo "local.sh: every process stopped cleanly" >&2
  exit "$status"
}
trap 'on_signal SIGINT 2' INT
trap 'on_signal SIGTERM 15' TERM
trap 'on_signal SIGHUP 1' HUP

# "[ID] " before every line, and after every carriage return too: a progress bar redraws its line
# with \r and ends it only when done, and a line-based filter (awk, sed) would hold it back so long.
# Each line (or \r-ended redraw) goes out whole in one write, never a piece of one: the processes'
# filters share one stdout and one stderr, and a piece would let another process's line in mid-line.
prefix() {
  "$python" -u -c 'import os, re, sys
tag, pending = sys.argv[1].encode(), b""
segment = re.compile(rb"[^\r\n]*(?:\r\n|\r(?!\n)|\n)")
while chunk := os.read(0, 65536):
  data, end = pending + chunk, 0
  for m in segment.finditer(data):
    if m.end() == len(data) and data.endswith(b"\r"):
      break  # perhaps the first half of \r\n
    os.write(1, tag + m.group())
    end = m.end()
  pending = data[end:]
if pending:
  os.write(1, tag + pending)' "[$1] "
}

for ((i = 0; i < num_processes; i++)); do
  command_for "$i"
  # Process substitutions keep $! the Python process's id (a pipeline's: its last command's).
  "${cmd[@]}" > >(prefix "$i") 2> >(prefix "$i" >&2) &
  pids+=("$!")
done

# Polled rather than `wait -n`, which cannot say which process ended before bash 5.1. bash reaps
# its children as they exit, so `kill -0` fails for a finished one and `wait PID` gives its status.
status=0
running=("${!pids[@]}")
while ((${#running[@]})); do
  still=()
  for i in "${running[@]}"; do
    if kill -0 "${pids[$i]}" 2>/dev/null; then
      still+=("$i")
      continue
    fi
    rc=0
    wait "${pids[$i]}" || rc=$?
    if ((rc != 0 && status == 0)); then
      status=$rc
      echo "local.sh: process $i exited with status $rc; stopping the others" >&2
      stop_all
    fi
  done
  running=(${still[@]+"${still[@]}"})
  ((${#running[@]})) && sleep 0.2
done
wait  # bash >= 5.1 also waits for the last output filter: the tail comes before the prompt.
exit "$status"
