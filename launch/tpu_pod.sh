#!/usr/bin/env bash
# Trains on a Cloud TPU VM or pod slice: one `python main.py` per TPU host, all joined by
# jax.distributed.initialize() (SPT_JAX_INIT=1; on TPU it finds the other hosts by itself). Each
# host generates the same ListOps cache on its own disk (deterministic, ~95 s) or reads DATA_DIR.
#
#   launch/tpu_pod.sh [--dry-run] COMMAND [-- EXTRA main.py ARGS...]
#
# Commands:
#   create    check that ZONE offers ACCELERATOR_TYPE and RUNTIME_VERSION, then create the TPU VM
#   copy      copy this repository (no .git, runs/, caches) to every worker, replacing REMOTE_DIR
#   setup     on every worker: uv, a Python >= PYTHON_VERSION virtual environment in VENV (kept if
#             it is one already), `pip install -e '.[gcs]' 'jax[tpu]'`; safe to repeat
#   run       on every worker, detached: SPT_JAX_INIT=1 python main.py --config=CONFIG
#             --workdir=WORKDIR ..., its output in ~/spt_jax_logs/ (latest.log); returns at once.
#             A worker whose run is still going starts no second one. Running it again after a
#             stop or a preemption resumes from WORKDIR's latest checkpoint.
#   stop      SIGTERM to every worker's run, which saves its latest checkpoint at the next step all
#             hosts agree on and exits; after STOP_GRACE seconds still running: SIGKILL; then
#             confirms each is gone
#   status    the TPU VM's state (PREEMPTED: see recreate) and whether each worker's run is going
#   logs      the last LOG_LINES lines of each worker's latest log
#   recreate  after a preemption (a spot or preemptible TPU VM loses its disks: code, venv, data
#             cache, logs): delete what is left, then create, copy, setup and run, which resumes
#             from WORKDIR (so WORKDIR must be gs://)
#   delete    delete the TPU VM
#   all       create, copy, setup and run
#   After editing the code: copy (and setup if dependencies changed), stop, run.
#
# Options:
#   --dry-run, DRY_RUN=1   print every command (gcloud and local staging), run nothing
#   -h, --help             this text
#
# Variables (environment; defaults in brackets):
#   TPU_NAME          name of the TPU VM                                       [spt-jax]
#   ACCELERATOR_TYPE  slice: v4-8 (one host), v4-32 (4 hosts), v5litepod-16 (v5e, 4 hosts),
#                     v5p-8, v6e-16 ...                                           [v4-8]
#   ZONE              a zone offering ACCELERATOR_TYPE; default per generation, one Google lists
#                     for it: v4 us-central2-b, v5e us-west4-a, v5p us-east5-a, v6e us-east1-d.
#                     `create` asks gcloud whether the zone has the type before creating.
#   RUNTIME_VERSION   TPU VM software image; default per generation: v4 tpu-ubuntu2204-base,
#                     v5e v2-alpha-tpuv5-lite, v5p v2-alpha-tpuv5, v6e v2-alpha-tpuv6e
#   PROJECT           Google Cloud project                [gcloud config get-value project]
#   BUCKET            Cloud Storage bucket for results, without gs://   (needed by `run`)
#   WORKDIR           --workdir of main.py               [gs://BUCKET/spt_jax/<config name>]
#   CONFIG            --config of main.py, relative to the repo    [configs/listops_spt.py]
#   DATA_DIR          --config.data.data_dir on the workers, a local copy of an lra_release on
#                     each worker                                             ['': generate]
#   REPO_DIR          local repository to copy               [the parent of this script's dir]
#   REMOTE_DIR        where the repository goes on each worker, under ~        [spt_jax]
#   VENV              virtual environment on each worker, under ~              [spt_jax_venv]
#   PYTHON_VERSION    Python of VENV, at least 3.11 (jax 0.10 needs it; the images' python3 is
#                     3.10, so uv installs this one)                            [3.11]
#   CREATE_FLAGS      extra flags for `tpu-vm create`, e.g. "--spot" or "--preemptible"
#   STOP_GRACE        seconds `stop` waits for a run to save and exit before SIGKILL     [300]
#   LOG_LINES         lines `logs` shows per worker                             [40]
#   EXTRA_ARGS        extra main.py arguments (also: anything after --), e.g. --config.seed=1
#
# Requires gcloud, authenticated, with the TPU API enabled. Multi-host slices: commands reach every
# worker over ssh at once, so load the key into an agent first, or gcloud asks for its passphrase
# once per worker:
#   eval "$(ssh-agent -s)" && ssh-add ~/.ssh/google_compute_engine
# Every host must see the same WORKDIR (all hosts write each checkpoint together and read it back to
# resume): a gs:// bucket the TPU VM's service account may write (spt_jax reaches it through
# etils.epath; '.[gcs]' installs gcsfs and google-cloud-storage), or an absolute path that every
# worker mounts at the same place. A relative WORKDIR is refused: it would sit inside REMOTE_DIR,
# which `copy` replaces.
set -euo pipefail

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }
die() { echo "tpu_pod.sh: $*" >&2; exit 2; }
warn() { echo "tpu_pod.sh: warning: $*" >&2; }

dry_run="${DRY_RUN:-0}"
command=""
while (($#)); do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --dry-run) dry_run=1; shift ;;
    --) shift; break ;;
    -*) die "unknown option $1 (see --help)" ;;
    *)
      [[ -z "$command" ]] || die "one command at a time (got $command and $1)"
      command="$1"; shift ;;
  esac
done
[[ -n "$command" ]] || { usage >&2; exit 2; }
case "$command" in
  create|copy|setup|run|stop|status|logs|recreate|delete|all) ;;
  *) die "unknown command $command (see --help)" ;;
esac
# EXTRA_ARGS splits on spaces, as an unquoted command line would.
extra_args=(${EXTRA_ARGS:-} "$@")

TPU_NAME="${TPU_NAME:-spt-jax}"
ACCELERATOR_TYPE="${ACCELERATOR_TYPE:-v4-8}"
# The generation decides the software image and the default zone.
case "$ACCELERATOR_TYPE" in
  v4-*) generation=v4; zone=us-central2-b; image=tpu-ubuntu2204-base ;;
  v5litepod-*|v5e-*) generation=v5e; zone=us-west4-a; image=v2-alpha-tpuv5-lite ;;
  v5p-*) generation=v5p; zone=us-east5-a; image=v2-alpha-tpuv5 ;;
  v6e-*) generation=v6e; zone=us-east1-d; image=v2-alpha-tpuv6e ;;
  *)
    [[ -n "${RUNTIME_VERSION:-}" && -n "${ZONE:-}" ]] ||
      die "ACCELERATOR_TYPE=$ACCELERATOR_TYPE: not a v4, v5e (v5litepod), v5p or v6e type; set" \
          "RUNTIME_VERSION and ZONE for it"
    generation=other; zone=""; image="" ;;
esac
ZONE="${ZONE:-$zone}"
RUNTIME_VERSION="${RUNTIME_VERSION:-$image}"
[[ "$ZONE" =~ ^[a-z]+-[a-z]+[0-9]+-[a-z]$ ]] ||
  die "ZONE=$ZONE is not a zone name (e.g. us-west4-a)"
if [[ -n "$image" && "$RUNTIME_VERSION" != "$image" ]]; then
  warn "RUNTIME_VERSION=$RUNTIME_VERSION on $generation, whose image is $image"
fi
CONFIG="${CONFIG:-configs/listops_spt.py}"
DATA_DIR="${DATA_DIR:-}"
REPO_DIR="${REPO_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
REMOTE_DIR="${REMOTE_DIR:-spt_jax}"
VENV="${VENV:-spt_jax_venv}"
PYTHON_VERSION="${PYTHON_VERSION:-3.11}"
[[ "$PYTHON_VERSION" =~ ^3\.([0-9]+)$ ]] && ((BASH_REMATCH[1] >= 11)) ||
  die "PYTHON_VERSION=$PYTHON_VERSION: spt_jax needs Python >= 3.11 (jax 0.10 does)"
CREATE_FLAGS="${CREATE_FLAGS:-}"
STOP_GRACE="${STOP_GRACE:-300}"
LOG_LINES="${LOG_LINES:-40}"
[[ "$STOP_GRACE" =~ ^[0-9]+$ && "$LOG_LINES" =~ ^[0-9]+$ ]] ||
  die "STOP_GRACE=$STOP_GRACE and LOG_LINES=$LOG_LINES must be whole numbers"
if [[ -z "${PROJECT:-}" ]]; then
  # Asking gcloud is harmless, but a dry run must work on a machine without it.
  PROJECT="$(gcloud config get-value project 2>/dev/null || true)"
  [[ -n "$PROJECT" ]] || { [[ "$dry_run" == 1 ]] && PROJECT=PROJECT; } || die "set PROJECT"
fi

# The config file's name and variant: configs/listops_spt.py:smoke → listops_spt_smoke.
config_name="$(basename "${CONFIG%%:*}" .py)${CONFIG##*.py}"; config_name="${config_name/:/_}"
workdir_or_die() {
  local workdir
  if [[ -n "${WORKDIR:-}" ]]; then
    workdir="$WORKDIR"
  elif [[ -n "${BUCKET:-}" ]]; then
    workdir="gs://${BUCKET#gs://}/spt_jax/$config_name"
  else
    [[ "$dry_run" == 1 ]] || die "set BUCKET (or WORKDIR) for run"
    workdir="gs://BUCKET/spt_jax/$config_name"
  fi
  case "$workdir" in
    gs://*) ;;
    /*) warn "WORKDIR=$workdir must be one filesystem that every worker mounts there" ;;
    *) die "WORKDIR=$workdir is relative: on the workers it would be inside ~/$REMOTE_DIR, which" \
           "copy replaces; use gs://... (or an absolute path every worker mounts)" ;;
  esac
  if [[ "$workdir" != gs://* && " $CREATE_FLAGS " =~ \ --(spot|preemptible)\  ]]; then
    warn "a $CREATE_FLAGS TPU VM loses its disks when preempted: WORKDIR=$workdir with them"
  fi
  echo "$workdir"
}

# One word as a shell reads it back; `--flag=value` keeps the flag bare so dry runs stay readable.
word() {
  if [[ "$1" =~ ^[A-Za-z0-9_./:=@%+,-]*$ ]]; then
    printf '%s' "$1"
  elif [[ "$1" =~ ^(--[A-Za-z0-9_.-]+=)(.*)$ ]]; then
    printf '%s' "${BASH_REMATCH[1]}"; word "${BASH_REMATCH[2]}"
  else
    printf "'%s'" "${1//\'/\'\\\'\'}"
  fi
}
quote() { local w sep=""; for w in "$@"; do printf '%s' "$sep"; word "$w"; sep=" "; done; }

# Prints the command (copy-pastable) on a dry run, runs it otherwise.
x() {
  if [[ "$dry_run" == 1 ]]; then
    quote "$@"; echo
  else
    echo "+ $(quote "$@")" >&2
    "$@"
  fi
}

# Like x, for a question whose failure stops the script with `$1` (the command follows it).
check() {
  local why="$1"; shift
  if [[ "$dry_run" == 1 ]]; then
    quote "$@"; echo
    return
  fi
  local out
  out="$("$@" 2>&1 >/dev/null)" || die "$why (gcloud: ${out%%$'\n'*})"
}

tpu=(gcloud compute tpus tpu-vm)
where=(--zone="$ZONE" --project="$PROJECT")

multi_host() {  # Slices of more than one host (v4-8, v5litepod-8, v5p-8, v6e-8 are one host).
  local chips="${ACCELERATOR_TYPE##*-}"
  [[ "$chips" =~ ^[0-9]+$ ]] && ((chips > 8))
}

ssh_agent_check() {
  # gcloud's ssh to all workers at once asks for the key's passphrase once per worker otherwise.
  [[ "$dry_run" == 1 ]] && return
  multi_host || return 0
  local key=~/.ssh/google_compute_engine fingerprint
  [[ -f "$key.pub" ]] || return 0  # gcloud makes the key on first use
  fingerprint="$(ssh-keygen -lf "$key.pub" 2>/dev/null | awk '{print $2}')"
  ssh-add -l 2>/dev/null | grep -qF "$fingerprint" ||
    warn "$key is not in an ssh agent; for $ACCELERATOR_TYPE's workers run first:" \
         "eval \"\$(ssh-agent -s)\" && ssh-add $key"
}

# One remote shell command on every worker at once; `set -e` so a failed step stops that worker.
on_all_workers() {
  ssh_agent_check
  x "${tpu[@]}" ssh "$TPU_NAME" "${where[@]}" --worker=all --command="set -e; $1"
}

do_create() {
  local no_type no_image
  no_type="ZONE=$ZONE does not offer ACCELERATOR_TYPE=$ACCELERATOR_TYPE (gcloud compute tpus"
  no_type+=" accelerator-types list --zone=$ZONE lists what it does; set ZONE to one that does)"
  no_image="ZONE=$ZONE has no TPU VM image RUNTIME_VERSION=$RUNTIME_VERSION (gcloud compute tpus"
  no_image+=" tpu-vm versions list --zone=$ZONE lists them)"
  check "$no_type" gcloud compute tpus accelerator-types describe "$ACCELERATOR_TYPE" "${where[@]}"
  check "$no_image" "${tpu[@]}" versions describe "$RUNTIME_VERSION" "${where[@]}"
  x "${tpu[@]}" create "$TPU_NAME" "${where[@]}" --accelerator-type="$ACCELERATOR_TYPE" \
    --version="$RUNTIME_VERSION" ${CREATE_FLAGS}
}

do_copy() {
  # One archive, unpacked beside the old copy and swapped in: a copy cut short leaves the old one.
  local stage remote
  if [[ "$dry_run" == 1 ]]; then
    stage="${TMPDIR:-/tmp}/spt_jax_stage.XXXXXX"
  else
    stage="$(mktemp -d "${TMPDIR:-/tmp}/spt_jax_stage.XXXXXX")"
    trap 'rm -rf "$stage"' RETURN
  fi
  x tar -C "$REPO_DIR" --exclude=.git --exclude=runs --exclude='*.egg-info' --exclude=__pycache__ \
    --exclude=.pytest_cache --exclude='.venv*' --exclude='venv' -czf "$stage/spt_jax.tar.gz" .
  x "${tpu[@]}" scp "$stage/spt_jax.tar.gz" "$TPU_NAME:spt_jax.tar.gz" "${where[@]}" --worker=all
  remote="~/$(quote "$REMOTE_DIR")"
  on_all_workers "rm -rf $remote.new && mkdir $remote.new && tar -C $remote.new -xzf \
~/spt_jax.tar.gz && rm -rf $remote && mv $remote.new $remote && rm ~/spt_jax.tar.gz"
}

do_setup() {
  # uv installs a managed CPython when the image's python3 is older than PYTHON_VERSION. A VENV of
  # a new enough Python is kept, so setup can be repeated; `uv pip install` then only updates.
  local venv="~/$(quote "$VENV")" v="$PYTHON_VERSION"
  on_all_workers "export PATH=~/.local/bin:\$PATH; command -v uv >/dev/null || python3 -m pip \
install --user -q uv || { sudo apt-get update -q && sudo apt-get install -y -q python3-pip \
&& python3 -m pip install --user -q uv; }; $venv/bin/python -c 'import sys; \
sys.exit(sys.version_info < tuple(map(int, \"$v\".split(\".\"))))' 2>/dev/null || { rm -rf $venv \
&& uv venv -q --seed --python $v $venv; }; cd ~/$(quote "$REMOTE_DIR") && uv pip install -q \
--python $venv/bin/python -e '.[gcs]' 'jax[tpu]' && $venv/bin/python -c 'import sys, jax, spt_jax; \
print(\"python\", sys.version.split()[0], \"jax\", jax.__version__)'"
}

# Each worker's run, recorded by process id in this file.
pid_file='~/.spt_jax_run.pid'

do_run() {
  local workdir args
  workdir="$(workdir_or_die)"
  args=(--config="$CONFIG" --workdir="$workdir")
  [[ -z "$DATA_DIR" ]] || args+=(--config.data.data_dir="$DATA_DIR")
  args+=(${extra_args[@]+"${extra_args[@]}"})
  # Detached (setsid, nohup, output to a log file): the run outlives the ssh session, and ssh
  # returns at once. gcloud re-runs a command whose ssh exits 255 (up to 10 times); a worker whose
  # recorded run is alive refuses to start another. The child writes its own pid (bash's $$, then
  # exec) so that the file names the Python process itself, which `stop` signals.
  on_all_workers "p=$pid_file; if [ -f \$p ] && kill -0 \$(cat \$p) 2>/dev/null; then echo \
\"\$(hostname): a run is going (pid \$(cat \$p)); not starting another\"; exit 0; fi; rm -f \$p; \
mkdir -p ~/spt_jax_logs; log=~/spt_jax_logs/run-\$(date +%Y%m%d-%H%M%S).log; ln -sfn \$log \
~/spt_jax_logs/latest.log; cd ~/$(quote "$REMOTE_DIR"); SPT_JAX_INIT=1 nohup setsid bash -c \
'echo \$\$ > $pid_file; exec ~/$(quote "$VENV")/bin/python main.py \"\$@\"' main.py \
$(quote "${args[@]}") > \$log 2>&1 < /dev/null & for i in \$(seq 50); do [ -f \$p ] && break; \
sleep 0.1; done; echo \"\$(hostname): started pid \$(cat \$p), log \$log\""
}

do_stop() {
  # A run saves at the next step every host agrees on once SIGTERM reaches it (XLA's preemption
  # notifier takes the signal; the process does not die of it), so wait for it before SIGKILL.
  local c="p=$pid_file; h=\$(hostname); "
  c+="if [ ! -f \$p ]; then echo \"\$h: no run recorded\"; exit 0; fi; pid=\$(cat \$p); "
  c+="if ! kill -0 \$pid 2>/dev/null; then echo \"\$h: run \$pid had ended\"; rm -f \$p; "
  c+="exit 0; fi; "
  c+="kill -TERM \$pid; for i in \$(seq $((STOP_GRACE * 5))); do "
  c+="kill -0 \$pid 2>/dev/null || break; sleep 0.2; done; "
  c+="if kill -0 \$pid 2>/dev/null; then echo \"\$h: run \$pid still going after $STOP_GRACE s: "
  c+="SIGKILL\"; kill -KILL \$pid; for i in \$(seq 20); do "
  c+="kill -0 \$pid 2>/dev/null || break; sleep 0.25; done; fi; "
  c+="if kill -0 \$pid 2>/dev/null; then echo \"\$h: run \$pid is still alive\"; exit 1; fi; "
  c+="rm -f \$p; echo \"\$h: run \$pid stopped\""
  on_all_workers "$c"
}

do_status() {
  x "${tpu[@]}" describe "$TPU_NAME" "${where[@]}" --format='value(state,health)'
  on_all_workers "p=$pid_file; h=\$(hostname); if [ -f \$p ] && kill -0 \$(cat \$p) \
2>/dev/null; then echo \"\$h: running (pid \$(cat \$p))\"; else echo \"\$h: no run going\"; fi; \
tail -n 1 ~/spt_jax_logs/latest.log 2>/dev/null | sed \"s/^/\$h: /\" || true"
}

do_logs() {
  on_all_workers "tail -n $LOG_LINES ~/spt_jax_logs/latest.log | sed \"s/^/\$(hostname): /\""
}

do_delete() { x "${tpu[@]}" delete "$TPU_NAME" "${where[@]}" --quiet; }

do_recreate() {
  workdir_or_die >/dev/null
  # A preempted TPU VM still exists (state PREEMPTED) and must go before one of its name is made.
  if [[ "$dry_run" == 1 ]]; then
    do_delete
  else
    do_delete || warn "no TPU VM $TPU_NAME to delete; creating it"
  fi
  do_create; do_copy; do_setup; do_run
}

case "$command" in
  create) do_create ;;
  copy) do_copy ;;
  setup) do_setup ;;
  run) do_run ;;
  stop) do_stop ;;
  status) do_status ;;
  logs) do_logs ;;
  recreate) do_recreate ;;
  delete) do_delete ;;
  all) workdir_or_die >/dev/null; do_create; do_copy; do_setup; do_run ;;
esac
