#!/usr/bin/env bash
# Trains on a Cloud TPU VM or pod slice: one `python main.py` per TPU host, all joined by
# jax.distributed.initialize() (SPT_JAX_INIT=1; on TPU it finds the other hosts by itself). Each
# host generates the same ListOps cache on its own disk (deterministic, ~95 s) or reads DATA_DIR.
#
#   launch/tpu_pod.sh [--dry-run] COMMAND [-- EXTRA main.py ARGS...]
#
# Commands:
#   create   create the TPU VM (gcloud compute tpus tpu-vm create)
#   copy     copy this repository (no .git, runs/, caches) to every worker, replacing REMOTE_DIR
#   setup    on every worker: a venv in VENV, then `pip install -e . "jax[tpu]"`
#   run      on every worker: SPT_JAX_INIT=1 python main.py --config=CONFIG --workdir=WORKDIR ...
#            (blocks, streaming every worker's output; running it again resumes the run)
#   stop     stop the run started by `run` on every worker (SIGTERM to the recorded process)
#   delete   delete the TPU VM
#   all      create, copy, setup and run
#   After editing the code: copy (and setup if dependencies changed), then run.
#
# Options:
#   --dry-run, DRY_RUN=1   print every command (gcloud and local staging), run nothing
#   -h, --help             this text
#
# Variables (environment; defaults in brackets):
#   TPU_NAME          name of the TPU VM                                       [spt-jax]
#   ZONE              a zone that has the accelerator type                     [us-central2-b]
#   ACCELERATOR_TYPE  slice, e.g. v4-8 (one host), v4-32 (4 hosts), v5litepod-16   [v4-8]
#   RUNTIME_VERSION   TPU VM software version                          [tpu-ubuntu2204-base]
#   PROJECT           Google Cloud project                [gcloud config get-value project]
#   BUCKET            Cloud Storage bucket for results, without gs://   (needed by `run`)
#   WORKDIR           --workdir of main.py               [gs://BUCKET/spt_jax/<config name>]
#   CONFIG            --config of main.py, relative to the repo    [configs/listops_spt.py]
#   DATA_DIR          --config.data.data_dir on the workers (an lra_release)  ['': generate]
#   REPO_DIR          local repository to copy               [the parent of this script's dir]
#   REMOTE_DIR        where the repository goes on each worker, under ~        [spt_jax]
#   VENV              virtual environment on each worker, under ~              [spt_jax_venv]
#   PYTHON            interpreter that creates the venv on the workers        [python3]
#   CREATE_FLAGS      extra flags for `tpu-vm create`, e.g. "--spot" or "--preemptible"
#   EXTRA_ARGS        extra main.py arguments (also: anything after --), e.g. --config.seed=1
#
# Requires gcloud, authenticated, with the TPU API enabled. Every host must see the same WORKDIR
# (all hosts write each checkpoint together and read it back to resume), so the TPU VM's service
# account needs write access to BUCKET. A gs:// WORKDIR needs spt_jax to reach every workdir path
# through etils.epath, not os.path and open(); until it does, use a directory that every worker
# mounts at the same place (e.g. with gcsfuse) instead.
set -euo pipefail

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }
die() { echo "tpu_pod.sh: $*" >&2; exit 2; }

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
  create|copy|setup|run|stop|delete|all) ;;
  *) die "unknown command $command (see --help)" ;;
esac
# EXTRA_ARGS splits on spaces, as an unquoted command line would.
extra_args=(${EXTRA_ARGS:-} "$@")

TPU_NAME="${TPU_NAME:-spt-jax}"
ZONE="${ZONE:-us-central2-b}"
ACCELERATOR_TYPE="${ACCELERATOR_TYPE:-v4-8}"
RUNTIME_VERSION="${RUNTIME_VERSION:-tpu-ubuntu2204-base}"
CONFIG="${CONFIG:-configs/listops_spt.py}"
DATA_DIR="${DATA_DIR:-}"
REPO_DIR="${REPO_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
REMOTE_DIR="${REMOTE_DIR:-spt_jax}"
VENV="${VENV:-spt_jax_venv}"
PYTHON="${PYTHON:-python3}"
CREATE_FLAGS="${CREATE_FLAGS:-}"
if [[ -z "${PROJECT:-}" ]]; then
  # Asking gcloud is harmless, but a dry run must work on a machine without it.
  PROJECT="$(gcloud config get-value project 2>/dev/null || true)"
  [[ -n "$PROJECT" ]] || { [[ "$dry_run" == 1 ]] && PROJECT=PROJECT; } || die "set PROJECT"
fi

# The config file's name and variant: configs/listops_spt.py:smoke → listops_spt_smoke.
config_name="$(basename "${CONFIG%%:*}" .py)${CONFIG##*.py}"; config_name="${config_name/:/_}"
workdir_or_die() {
  if [[ -n "${WORKDIR:-}" ]]; then echo "$WORKDIR"; return; fi
  if [[ -z "${BUCKET:-}" ]]; then
    [[ "$dry_run" == 1 ]] || die "set BUCKET (or WORKDIR) for run"
    echo "gs://BUCKET/spt_jax/$config_name"
    return
  fi
  echo "gs://${BUCKET#gs://}/spt_jax/$config_name"
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

tpu=(gcloud compute tpus tpu-vm)
where=(--zone="$ZONE" --project="$PROJECT")

# One remote shell command on every worker at once; `set -e` so a failed step stops that worker.
on_all_workers() {
  x "${tpu[@]}" ssh "$TPU_NAME" "${where[@]}" --worker=all --command="set -e; $1"
}

do_create() {
  x "${tpu[@]}" create "$TPU_NAME" "${where[@]}" --accelerator-type="$ACCELERATOR_TYPE" \
    --version="$RUNTIME_VERSION" ${CREATE_FLAGS}
}

do_copy() {
  # A clean copy (no .git, runs, caches or local venvs): scp --recurse sends every file it finds.
  local stage
  if [[ "$dry_run" == 1 ]]; then
    stage="${TMPDIR:-/tmp}/spt_jax_stage.XXXXXX"
  else
    stage="$(mktemp -d "${TMPDIR:-/tmp}/spt_jax_stage.XXXXXX")"
    trap 'rm -rf "$stage"' RETURN
  fi
  x mkdir -p "$stage/$REMOTE_DIR"
  x tar -C "$REPO_DIR" --exclude=.git --exclude=runs --exclude='*.egg-info' --exclude=__pycache__ \
    --exclude=.pytest_cache --exclude='.venv*' --exclude='venv' -cf "$stage/repo.tar" .
  x tar -C "$stage/$REMOTE_DIR" -xf "$stage/repo.tar"
  on_all_workers "rm -rf ~/$(quote "$REMOTE_DIR")"
  x "${tpu[@]}" scp --recurse "$stage/$REMOTE_DIR" "$TPU_NAME:~/" "${where[@]}" --worker=all
}

do_setup() {
  # Ubuntu's TPU images may lack python3-venv: installed if creating the venv fails. gcsfs is how
  # etils.epath (so Orbax's metadata) reaches gs://; google-cloud-storage is tensorboardX's way.
  local venv activate
  venv="$(quote "$PYTHON") -m venv ~/$(quote "$VENV")"
  activate="source ~/$(quote "$VENV")/bin/activate"
  on_all_workers "{ $venv || { sudo apt-get update -q && sudo apt-get install -y -q python3-venv \
&& $venv; }; } && $activate && pip install -q --upgrade pip && cd ~/$(quote "$REMOTE_DIR") \
&& pip install -q -e . \"jax[tpu]\" gcsfs google-cloud-storage \
&& python -c \"import jax, spt_jax; print('jax', jax.__version__)\""
}

do_run() {
  local workdir args
  workdir="$(workdir_or_die)"
  args=(--config="$CONFIG" --workdir="$workdir")
  [[ -z "$DATA_DIR" ]] || args+=(--config.data.data_dir="$DATA_DIR")
  args+=(${extra_args[@]+"${extra_args[@]}"})
  # The process id goes to a file so that `stop` ends exactly this run; exec makes it Python's.
  on_all_workers "source ~/$(quote "$VENV")/bin/activate && cd ~/$(quote "$REMOTE_DIR") \
&& echo \$\$ > ~/.spt_jax_run.pid && SPT_JAX_INIT=1 exec python main.py $(quote "${args[@]}")"
}

do_stop() {
  on_all_workers "if [ -f ~/.spt_jax_run.pid ]; then \
kill -TERM \$(cat ~/.spt_jax_run.pid) 2>/dev/null || true; rm -f ~/.spt_jax_run.pid; fi"
}

do_delete() { x "${tpu[@]}" delete "$TPU_NAME" "${where[@]}" --quiet; }

case "$command" in
  create) do_create ;;
  copy) do_copy ;;
  setup) do_setup ;;
  run) do_run ;;
  stop) do_stop ;;
  delete) do_delete ;;
  all) do_create; do_copy; do_setup; do_run ;;
esac
