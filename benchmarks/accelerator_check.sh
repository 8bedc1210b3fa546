#!/usr/bin/env bash
# The one check of spt-jax on a GPU or TPU machine, in at most 8 minutes:
#
#   benchmarks/accelerator_check.sh --out=DIR                    # platform detected (nvidia-smi, /dev/accel*)
#   benchmarks/accelerator_check.sh --platform=cuda --out=DIR    # or tpu
#   benchmarks/accelerator_check.sh --platform=cpu --out=DIR     # dry mode: the same steps, tiny, seconds each
#
# Steps, each under its own time limit, so that the whole check ends within --budget-s (480):
#   install   pip install -e '.[cuda]' or '.[tpu]' (setup.py), unless JAX already runs on the device
#             (--install=auto, the default; always; never), then the device JAX sees
#   tests     the tests marked `accelerator` (cuDNN against dense attention with padding, causal
#             mask and ALiBi; bf16 against float32 loss on a smoke run), which skip on a CPU
#   benchmark benchmarks/train_step.py at the LRA shapes (ListOps 6x512 L=2000, Pathfinder 4x128
#             L=1024, Retrieval 4x128 2x4000; batch 32), bfloat16, JAX only, with MFU against the
#             device's peak (PEAKS below)
#   run       python main.py --config=configs/listops_spt.py at full size, bfloat16, stopped after
#             --run-s (180) seconds by SIGTERM (which saves and exits), checking that the training
#             loss falls; the data are generated in the background from the start
# and writes DIR/accelerator_check.json (everything) and DIR/accelerator_check.md (the tables);
# exit status 0 when every step passed, 1 when one failed (each failure named in both files), 2 for
# bad arguments. DIR must be new or empty. The dry mode skips the install, runs the benchmark with
# --tiny, pretrain steps only, and the run on a tiny config for 40 steps.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$(command -v python || command -v python3)}"

# Dense (no sparsity) bfloat16 peak per chip in TFLOP/s, by JAX's device_kind (a regex; the first
# that matches), with the source of each number. MFU = the step's analytic model FLOPs
# (train_step.py's analytic_flops) / step time / this peak.
PEAKS='H100.*PCIe|756|NVIDIA H100 Tensor Core GPU datasheet (PCIe: 1,513 with sparsity, half dense)
H100|H200|989|NVIDIA H100 and H200 Tensor Core GPU datasheets (SXM: 1,979 with sparsity, half dense)
A100|312|NVIDIA A100 Tensor Core GPU datasheet (dense BF16)
TPU v4|275|Google Cloud TPU v4 documentation (bf16 per chip)
TPU v5 ?lite|TPU v5e|197|Google Cloud TPU v5e documentation (bf16 per chip)
TPU v5p|TPU v5$|459|Google Cloud TPU v5p documentation (bf16 per chip)
TPU v6 ?lite|TPU v6e|918|Google Cloud TPU v6e (Trillium) documentation (bf16 per chip)'

# Every test file holding tests marked `accelerator` (tests/test_accelerator_check.py keeps this
# list complete).
ACCELERATOR_TESTS="tests/test_mixed_precision.py"
BENCH_SHAPES="listops,pathfinder,retrieval"

usage() {
  sed -n '2,24p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  echo "Options: --platform=cuda|tpu|cpu --out=DIR --install=auto|always|never --budget-s=480 --run-s=180"
}
die() { echo "accelerator_check.sh: $*" >&2; exit 2; }

PLATFORM="" OUT_DIR="" INSTALL="auto" BUDGET_S=480 RUN_S=180
for arg in "$@"; do
  case "$arg" in
    --platform=*) PLATFORM="${arg#*=}" ;;
    --out=*) OUT_DIR="${arg#*=}" ;;
    --install=*) INSTALL="${arg#*=}" ;;
    --budget-s=*) BUDGET_S="${arg#*=}" ;;
    --run-s=*) RUN_S="${arg#*=}" ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$arg' (--help lists them)" ;;
  esac
done
[[ -n "$OUT_DIR" ]] || die "--out=DIR is required (a new or empty directory for the results)"
[[ "$INSTALL" =~ ^(auto|always|never)$ ]] || die "--install=$INSTALL must be auto, always or never"
[[ "$BUDGET_S" =~ ^[0-9]+$ && "$RUN_S" =~ ^[0-9]+$ ]] || die "--budget-s and --run-s take seconds"
if [[ -z "$PLATFORM" ]]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then PLATFORM=cuda
  elif compgen -G "/dev/accel*" >/dev/null || [[ -n "${TPU_ACCELERATOR_TYPE:-}${TPU_NAME:-}" ]]; then
    PLATFORM=tpu
  else
    die "no GPU (nvidia-smi -L) or TPU (/dev/accel*) found: pass --platform=cuda or tpu, or --platform=cpu for the dry mode"
  fi
fi
case "$PLATFORM" in
  cuda) BACKEND=gpu ;;
  tpu) BACKEND=tpu ;;
  cpu) BACKEND=cpu ;;
  *) die "--platform=$PLATFORM must be cuda, tpu or cpu" ;;
esac
if [[ -e "$OUT_DIR" && -n "$(ls -A "$OUT_DIR" 2>/dev/null)" ]]; then
  die "--out=$OUT_DIR is not empty: give a new directory (a run found there would be resumed)"
fi
mkdir -p "$OUT_DIR/logs" || die "cannot create --out=$OUT_DIR"
OUT_DIR="$(cd "$OUT_DIR" && pwd)"
cd "$ROOT" || exit 2
export PYTHONUNBUFFERED=1
STAGES="$OUT_DIR/stages.tsv"
: >"$STAGES"
START=$(date +%s)

# What the steps run: the real shapes on an accelerator, tiny ones in the dry mode.
RUN_FLAGS=(--config=configs/listops_spt.py "--workdir=$OUT_DIR/listops_spt" --config.model.dtype=bfloat16)
DATA_FLAGS=()
BENCH_FLAGS=(--shapes "$BENCH_SHAPES" --steps 5 --warmup 1 --no-torch --dtype bfloat16 --cpu-devices 1)
TESTS_CAP=120 BENCH_CAP=240 KILL_GRACE=30 REPORT_RESERVE=15
if [[ "$PLATFORM" == cpu ]]; then
  DATA_FLAGS=("data.cache_dir=$OUT_DIR/cache" data.max_length=32 data.generator.num_train=64
              data.generator.num_val=16 data.generator.num_test=16 data.generator.min_length=4
              data.generator.max_length=32 data.generator.max_depth=4 data.generator.max_args=4)
  RUN_FLAGS+=(--config.phases=pretrain --config.model.num_layers=1 --config.model.d_model=16
              --config.model.num_heads=2 --config.model.d_ff=32 --config.pretrain.batch_size=8
              --config.pretrain.num_steps=40 --config.pretrain.warmup_steps=2
              --config.pretrain.log_every_steps=5 --config.pretrain.eval_every_steps=40
              --config.pretrain.checkpoint_every_steps=40)
  BENCH_FLAGS+=(--tiny --batch 2 --steps 2 --kinds pretrain)
  TESTS_CAP=60 BENCH_CAP=90 RUN_S=$(( RUN_S < 90 ? RUN_S : 90 )) KILL_GRACE=10
fi
for flag in "${DATA_FLAGS[@]}"; do RUN_FLAGS+=("--config.$flag"); done

remaining() { echo $(( BUDGET_S - ($(date +%s) - START) )); }
# limit CAP RESERVE: a step's seconds, at most CAP, leaving RESERVE for the steps after it; 0 when
# fewer than 5 are left (the step is then not run: `timeout 0` would mean no limit at all).
limit() {
  local left=$(( $(remaining) - $2 ))
  left=$(( left < $1 ? left : $1 ))
  echo $(( left < 5 ? 0 : left ))
}
NO_TIME="not run: no time left in --budget-s"
record() {  # stage status seconds exit-status detail
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$(printf '%s' "$5" | tr '\t\n' '  ')" >>"$STAGES"
  echo "[accelerator_check] $1: $2 (${3} s) $5"
}

# ---- data for the run, in the background from the start (generating LRA ListOps takes ~1.5 min)
"$PYTHON" - "${DATA_FLAGS[@]}" >"$OUT_DIR/logs/data.log" 2>&1 <<'EOF' &
import sys, time
start = time.time()
from spt_jax import config_lib
from spt_jax.data import tasks
config = config_lib.load_config("configs/listops_spt.py")
for override in sys.argv[1:]:  # key=value, as main.py's --config.key=value
  key, value = override.split("=", 1)
  *path, last = key.split(".")
  node = config
  for part in path:
    node = node[part]
  node[last] = type(node[last])(value)
task = tasks.load(config.data)
sizes = ", ".join(f"{split} {len(arrays['inputs'])}" for split, arrays in task.splits.items())
print(f"{task.name} data ready ({sizes}) after {time.time() - start:.0f} s in the background")
EOF
DATA_PID=$!

# ---- install
t0=$(date +%s)
probe() {  # writes device.json; exit status 0 when spt-jax imports and JAX's backend is $BACKEND
  "$PYTHON" - "$BACKEND" "$OUT_DIR/device.json" <<'EOF'
import importlib, json, sys
missing = []
for module in ("flax", "optax", "orbax.checkpoint", "etils.epath", "ml_collections", "absl", "tqdm",
               "tensorboardX", "PIL", "matplotlib", "pytest", "spt_jax.experiment"):
  try:
    importlib.import_module(module)
  except ImportError as e:
    missing.append(f"{module} ({e})")
import jax
d = jax.devices()[0]
info = {"backend": jax.default_backend(), "device_kind": d.device_kind, "devices": jax.device_count(),
        "jax": jax.__version__, "missing": missing}
json.dump(info, open(sys.argv[2], "w"))
print(info)
sys.exit(0 if info["backend"] == sys.argv[1] and not missing else 1)
EOF
}
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # the probes and the report hold no GPU memory
if [[ "$PLATFORM" == cpu ]]; then
  probe >"$OUT_DIR/logs/install.log" 2>&1
  record install skipped $(( $(date +%s) - t0 )) 0 "dry mode: nothing to install"
elif [[ "$INSTALL" == auto ]] && probe >"$OUT_DIR/logs/install.log" 2>&1; then
  record install skipped $(( $(date +%s) - t0 )) 0 "JAX already runs on $BACKEND ($(cat "$OUT_DIR/device.json"))"
else
  rc=0
  lim=$(limit 150 $(( RUN_S + 60 )))
  if [[ "$INSTALL" != never && $lim -gt 0 ]]; then
    timeout -k 10 "$lim" "$PYTHON" -m pip install -e "$ROOT[$PLATFORM]" \
      >>"$OUT_DIR/logs/install.log" 2>&1 || rc=$?
  fi
  if probe >>"$OUT_DIR/logs/install.log" 2>&1; then
    record install passed $(( $(date +%s) - t0 )) "$rc" "pip install -e '.[$PLATFORM]'; $(cat "$OUT_DIR/device.json")"
  else
    what="after pip install -e '.[$PLATFORM]' (exit $rc)"
    [[ "$INSTALL" == never ]] && what="with --install=never"
    [[ "$INSTALL" != never && $lim -eq 0 ]] && what="pip install not run (no time left in --budget-s)"
    record install failed $(( $(date +%s) - t0 )) "$rc" "$what, spt-jax does not import or JAX's backend is not $BACKEND: $(cat "$OUT_DIR/device.json" 2>/dev/null) (logs/install.log)"
    INSTALL_FAILED=1
  fi
fi
unset XLA_PYTHON_CLIENT_PREALLOCATE

if [[ -z "${INSTALL_FAILED:-}" ]]; then
  # ---- tests that need the device
  t0=$(date +%s); rc=0
  lim=$(limit "$TESTS_CAP" $(( RUN_S + KILL_GRACE + REPORT_RESERVE + 60 )))
  if [[ $lim -gt 0 ]]; then  # -o addopts=: in this one process (no xdist workers sharing the device)
    timeout -k 10 "$lim" "$PYTHON" -m pytest -q -o addopts= -m accelerator -p no:cacheprovider \
      --junitxml="$OUT_DIR/device_tests.xml" $ACCELERATOR_TESTS >"$OUT_DIR/logs/device_tests.log" 2>&1 \
      || rc=$?
  fi
  summary="$(grep -E '(passed|failed|skipped|error)' "$OUT_DIR/logs/device_tests.log" 2>/dev/null | tail -1)"
  if [[ $lim -eq 0 ]]; then status="$NO_TIME"; elif [[ $rc -eq 0 ]]; then status=passed; else status=failed; fi
  record tests "$status" $(( $(date +%s) - t0 )) "$rc" "pytest -m accelerator $ACCELERATOR_TESTS: ${summary:-no summary} (logs/device_tests.log)"

  # ---- train-step benchmark at the LRA shapes
  t0=$(date +%s); rc=0
  lim=$(limit "$BENCH_CAP" $(( RUN_S + KILL_GRACE + REPORT_RESERVE )))
  if [[ $lim -gt 0 ]]; then
    timeout -k 10 "$lim" "$PYTHON" benchmarks/train_step.py "${BENCH_FLAGS[@]}" \
      --out "$OUT_DIR/train_step" >"$OUT_DIR/logs/train_step.log" 2>&1 || rc=$?
  fi
  if [[ $lim -eq 0 ]]; then status="$NO_TIME"; elif [[ $rc -eq 0 ]]; then status=passed; else status=failed; fi
  [[ $rc -eq 124 || $rc -eq 137 ]] && status="stopped at its time limit (${lim} s)"
  record benchmark "$status" $(( $(date +%s) - t0 )) "$rc" "benchmarks/train_step.py ${BENCH_FLAGS[*]} (logs/train_step.log)"

  # ---- the listops_spt.py run
  # The data: waited for while the run would still get half its time (seconds: the wait).
  t0=$(date +%s); rc=0
  while kill -0 "$DATA_PID" 2>/dev/null && [[ $(limit "$RUN_S" $(( KILL_GRACE + REPORT_RESERVE ))) -ge $(( RUN_S / 2 )) ]]; do
    sleep 1
  done
  if kill -0 "$DATA_PID" 2>/dev/null; then
    kill "$DATA_PID"; wait "$DATA_PID" 2>/dev/null
    record data failed $(( $(date +%s) - t0 )) 1 "not ready in time, stopped (logs/data.log)"
  else
    wait "$DATA_PID" || rc=$?
    record data "$([[ $rc -eq 0 ]] && echo passed || echo failed)" $(( $(date +%s) - t0 )) "$rc" \
      "$(tail -1 "$OUT_DIR/logs/data.log") (logs/data.log)"
  fi
  t0=$(date +%s); rc=0
  run_s=$(limit "$RUN_S" "$(( KILL_GRACE + REPORT_RESERVE ))")
  echo "$PYTHON main.py ${RUN_FLAGS[*]}" >"$OUT_DIR/logs/listops_run.log"
  if [[ $run_s -gt 0 ]]; then
    timeout -k "$KILL_GRACE" -s TERM "$run_s" "$PYTHON" main.py "${RUN_FLAGS[@]}" \
      >>"$OUT_DIR/logs/listops_run.log" 2>&1 || rc=$?
  else
    rc=-1
  fi
  case $rc in
    -1) status="$NO_TIME"; how="" ;;
    0) status=passed; how="finished" ;;
    124) status=passed; how="stopped by SIGTERM after ${run_s} s (saved and exited)" ;;
    137) status=failed; how="killed: it did not exit within ${KILL_GRACE} s of SIGTERM at ${run_s} s" ;;
    *) status=failed; how="exit status $rc" ;;
  esac
  record run "$status" $(( $(date +%s) - t0 )) "$rc" "python main.py ${RUN_FLAGS[*]}: $how (logs/listops_run.log)"
else
  kill "$DATA_PID" 2>/dev/null
  wait "$DATA_PID" 2>/dev/null
fi

# ---- report: accelerator_check.json and .md
XLA_PYTHON_CLIENT_PREALLOCATE=false PEAKS="$PEAKS" CHECK_PLATFORM="$PLATFORM" \
  CHECK_BUDGET_S="$BUDGET_S" CHECK_START="$START" BENCH_SHAPES="$BENCH_SHAPES" \
  BENCH_FLAGS="${BENCH_FLAGS[*]}" "$PYTHON" - "$OUT_DIR" <<'EOF'
import datetime, json, math, os, re, statistics, sys, time
import xml.etree.ElementTree as ET

out = sys.argv[1]
env = os.environ
platform, dry = env["CHECK_PLATFORM"], env["CHECK_PLATFORM"] == "cpu"
read_json = lambda path: json.load(open(path)) if os.path.exists(path) else None
stages = [dict(zip(("stage", "status", "seconds", "exit_status", "detail"), line.rstrip("\n").split("\t")))
          for line in open(os.path.join(out, "stages.tsv"))]
for s in stages:
  s["seconds"], s["exit_status"] = int(s["seconds"]), int(s["exit_status"])
failures = [f"{s['stage']}: {s['status']}: {s['detail']}" for s in stages
            if s["status"] not in ("passed", "skipped")]
device = read_json(os.path.join(out, "device.json")) or {}
# Without a working install nothing else ran: its failure is the one to read.
ran = not any(s["stage"] == "install" and s["status"] == "failed" for s in stages)

# Peak: the table's, by device kind; in the dry mode this CPU's measured float32 matmul rate.
bench = read_json(os.path.join(out, "train_step", "train_step.json"))
peak = None
for line in env["PEAKS"].strip().splitlines():
  pattern, tflops, source = line.rsplit("|", 2)
  if not dry and re.search(pattern, device.get("device_kind", "")):
    peak = {"tflops": float(tflops), "source": source, "device_kind": device["device_kind"]}
    break
if dry and bench:
  peak = {"tflops": bench["matmul_peak_gflops"]["jax"] / 1e3, "device_kind": device.get("device_kind"),
          "source": "measured: this CPU's float32 matmul rate (train_step.py's probe; the dry mode has no table peak)"}
if peak is None and not dry and ran:
  failures.append(f"benchmark: no peak for device kind {device.get('device_kind')!r} in PEAKS (MFU not computed)")

# Device tests, from pytest's JUnit XML.
tests = []
xml = os.path.join(out, "device_tests.xml")
if os.path.exists(xml):
  for case in ET.parse(xml).getroot().iter("testcase"):
    outcome = next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), "passed")
    reason = next((c.get("message", "") for c in case if c.tag in ("failure", "error", "skipped")), "")
    tests.append({"test": f"{case.get('classname')}::{case.get('name')}", "outcome": outcome,
                  "reason": reason.splitlines()[0][:200] if reason else "", "seconds": float(case.get("time", 0))})
counts = {k: sum(t["outcome"] == k for t in tests) for k in ("passed", "failure", "error", "skipped")}
if not tests and any(s["stage"] == "tests" for s in stages):
  failures.append("tests: no test report (device_tests.xml)")
if not dry and tests and counts["passed"] == 0:
  failures.append("tests: no accelerator test ran on the device (all skipped)")

# Benchmark rows, MFU against the peak.
rows, kinds = [], re.search(r"--kinds (\S+)", env["BENCH_FLAGS"])
expected = [(s, k) for s in env["BENCH_SHAPES"].split(",")
            for k in (kinds.group(1).split(",") if kinds else ("pretrain", "finetune"))]
got = {(r["shape"], r["kind"]): r for r in (bench or {}).get("results", [])}
for shape, kind in expected:
  r = got.get((shape, kind))
  if r is None and not ran:
    rows.append({"shape": shape, "kind": kind, "missing": "not run (install failed)"})
    continue
  if r is None:
    why = next((s["reason"] for s in (bench or {}).get("skipped", []) if s["shape"] in (shape, f"{shape}/{kind}")),
               "not reached (the benchmark step's status says why)")
    rows.append({"shape": shape, "kind": kind, "missing": why})
    failures.append(f"benchmark: {shape}/{kind}: {why}")
    continue
  flops = r["analytic_flops"]["total"]
  step_s = r["jax_ms"] / 1e3
  rows.append({"shape": shape, "kind": kind, "model": r.get("model"), "length": r["length"], "batch": r["batch"],
               "dtype": r.get("dtype"), "ms_per_step": r["jax_ms"], "tokens_per_s": r["jax_tok_s"],
               "analytic_tflop_per_step": flops / 1e12, "xla_tflop_per_step": r["xla_flops"] / 1e12,
               "compile_s": r["jax_compile_s"],
               "mfu": flops / step_s / (peak["tflops"] * 1e12) if peak else None})

# The run: the training loss of its first phase must fall.
run = {}
metrics = os.path.join(out, "listops_spt", "pretrain", "metrics.jsonl")
train = [json.loads(l) for l in open(metrics)] if os.path.exists(metrics) else []
train = [r for r in train if r["split"] == "train"]
if len(train) >= 2:
  tail = train[-max(1, len(train) // 4):]
  first, last = train[0]["loss"], statistics.mean(r["loss"] for r in tail)
  rates = [r["steps_per_sec"] for r in train[1:] if "steps_per_sec" in r]
  run = {"logged_steps": [r["step"] for r in train], "losses": [r["loss"] for r in train],
         "first_loss": first, "last_quarter_loss": last, "loss_falls": last < first,
         "steps": train[-1]["step"], "median_steps_per_s": statistics.median(rates) if rates else None}
  if not run["loss_falls"]:
    failures.append(f"run: the training loss did not fall ({first:.4f} at step {train[0]['step']}, "
                    f"{last:.4f} over the last quarter of logged steps)")
elif ran:
  failures.append(f"run: fewer than 2 logged training steps in {metrics}: logs/listops_run.log")

report = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "platform": platform, "dry_run": dry,
          "device": device, "peak": peak, "budget_s": int(env["CHECK_BUDGET_S"]),
          "wall_s": round(time.time() - int(env["CHECK_START"])), "passed": not failures, "failures": failures,
          "stages": stages, "device_tests": {"counts": counts, "tests": tests}, "benchmark": rows,
          "benchmark_machine": (bench or {}).get("machine"), "run": run}
json.dump(report, open(os.path.join(out, "accelerator_check.json"), "w"), indent=1)

fmt = lambda x, spec: "–" if x is None else format(x, spec)
md = [f"# Accelerator check ({report['date']}{', dry mode on CPU' if dry else ''})", "",
      f"Device: {device.get('device_kind', '?')} × {device.get('devices', '?')} (JAX backend "
      f"{device.get('backend', '?')}, jax {device.get('jax', '?')}); peak "
      + (f"{peak['tflops']:,.1f} TFLOP/s ({peak['source']})" if peak else "unknown") + ". "
      f"Whole check {report['wall_s']} s of the {report['budget_s']} s budget. "
      f"**{'PASSED' if report['passed'] else 'FAILED'}**", ""]
md += [f"- {f}" for f in failures] + ([""] if failures else [])
md += ["## Steps", "", "| step | status | seconds | detail |", "|---|---|---|---|"]
md += [f"| {s['stage']} | {s['status']} | {s['seconds']} | {s['detail']} |" for s in stages]
md += ["", f"## Device tests (`-m accelerator`): {counts['passed']} passed, {counts['failure'] + counts['error']} "
       f"failed, {counts['skipped']} skipped", "", "| test | outcome | seconds | reason |", "|---|---|---|---|"]
md += [f"| {t['test']} | {t['outcome']} | {t['seconds']:.1f} | {t['reason']} |" for t in tests]
md += ["", f"## Train step (benchmarks/train_step.py {env['BENCH_FLAGS']})", "",
       "| shape | step | model | L | batch | dtype | ms/step | tokens/s | TFLOP/step (analytic) | MFU | compile s |",
       "|---|---|---|---|---|---|---|---|---|---|---|"]
for r in rows:
  if "missing" in r:
    md.append(f"| {r['shape']} | {r['kind']} | missing: {r['missing']} | | | | | | | | |")
  else:
    md.append(f"| {r['shape']} | {r['kind']} | {r['model']} | {r['length']} | {r['batch']} | {r['dtype']} | "
              f"{r['ms_per_step']:,.1f} | {r['tokens_per_s']:,.0f} | {r['analytic_tflop_per_step']:.4g} | "
              f"{fmt(r['mfu'], '.1%')} | {r['compile_s']:.1f} |")
md += ["", "## configs/listops_spt.py run", "", "| steps reached | first loss | last-quarter loss | loss falls | steps/s (median) |",
       "|---|---|---|---|---|"]
if run:
  md.append(f"| {run['steps']} | {run['first_loss']:.4f} | {run['last_quarter_loss']:.4f} | "
            f"{'yes' if run['loss_falls'] else '**no**'} | {fmt(run['median_steps_per_s'], ',.1f')} |")
else:
  md.append("| – | – | – | **no run** | – |")
open(os.path.join(out, "accelerator_check.md"), "w").write("\n".join(md) + "\n")
print("\n".join(md))
sys.exit(0 if report["passed"] else 1)
EOF
