"""Train-step memory and speed of the attention implementations as the sequence grows.

  python benchmarks/attention_memory.py --lengths 1024,2048,4096,8192,16384 --impls dense,blockwise

For each (implementation, length) a fresh process compiles the full SPT train step (4-layer, d_model
128, 4-head Transformer, masked-token loss, AdamW, batch 8) and reports XLA's compiled memory
(temp buffers and predicted peak), the process's max RSS, and tokens/s over a few steps after
compilation. Steps whose predicted peak exceeds --max_gb are compiled but not run. Prints a markdown
table and writes the rows as JSON to --out.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GB = 1e9


def parse_args(argv=None) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--lengths", default="1024,2048,4096,8192,16384")
  p.add_argument("--impls", default="dense,blockwise")
  p.add_argument("--steps", type=int, default=2, help="timed steps after compilation")
  p.add_argument("--max_step_s", type=float, default=120.0,
                 help="stop timing after the first step that ends past this many seconds")
  p.add_argument("--max_gb", type=float, default=20.0, help="skip running above this predicted peak")
  p.add_argument("--batch", type=int, default=8)
  p.add_argument("--num_layers", type=int, default=4)
  p.add_argument("--d_model", type=int, default=128)
  p.add_argument("--num_heads", type=int, default=4)
  p.add_argument("--block_size", type=int, default=512, help="config.model.attention_block_size")
  p.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "attention_memory.json"))
  p.add_argument("--worker", default="", help=argparse.SUPPRESS)  # "impl,length": one measurement
  return p.parse_args(argv)


def measure(impl: str, length: int, args: argparse.Namespace) -> dict:
  """Compiles (and unless too big, runs) one train step in this process."""
  sys.path.insert(0, ROOT)
  import jax
  import jax.numpy as jnp
  import numpy as np
  import optax

  from spt_jax.data.vocab import NUM_SPECIAL
  from spt_jax.models import transformer
  from spt_jax.objectives.masked import MaskedTokenPrediction

  vocab_size = NUM_SPECIAL + 17  # ~20 symbols, like ListOps
  model = transformer.build(vocab_size=vocab_size, max_length=length, head="mlm",
                            num_layers=args.num_layers, d_model=args.d_model,
                            num_heads=args.num_heads, d_ff=4 * args.d_model, attention=impl,
                            attention_block_size=args.block_size)
  objective = MaskedTokenPrediction(model, mask_rate=0.15, bert_mix=False,
                                    first_regular_id=NUM_SPECIAL, vocab_size=vocab_size)
  tx = optax.adamw(1e-3, weight_decay=0.01)

  rng = np.random.default_rng(0)
  tokens = rng.integers(NUM_SPECIAL, vocab_size, (args.batch, length), dtype=np.int32)
  tokens[-1, length // 2:] = 0  # one half-padded row, so the padding path is exercised
  batch = {"inputs": jnp.asarray(tokens), "weights": jnp.ones((args.batch,), jnp.float32)}
  # Parameters do not depend on the length (sinusoidal positions), so initialise on a short input
  # rather than compiling a full-length forward pass just to throw it away.
  params = jax.jit(model.init)(jax.random.PRNGKey(0), batch["inputs"][:1, :8])["params"]
  opt_state = jax.jit(tx.init)(params)

  def train_step(params, opt_state, batch, rng):
    loss_fn = lambda p: objective.loss(p, batch, rng, train=True)
    (loss, _), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  start = time.perf_counter()
  step_rng = jax.random.PRNGKey(1)
  compiled = jax.jit(train_step, donate_argnums=(0, 1)).lower(
      params, opt_state, batch, step_rng).compile()
  row = {"impl": impl, "length": length, "batch": args.batch, "block_size": args.block_size,
         "compile_s": time.perf_counter() - start}
  mem = compiled.memory_analysis()
  row["temp_gb"] = mem.temp_size_in_bytes / GB
  # Arguments (params, optimiser state, batch) + temp + outputs not aliased to donated arguments.
  # (CompiledMemoryStats.peak_memory_in_bytes leaves out the temp buffers on CPU, so it is not used.)
  row["peak_gb"] = (mem.argument_size_in_bytes + mem.temp_size_in_bytes + mem.output_size_in_bytes
                    - mem.alias_size_in_bytes) / GB

  if row["peak_gb"] > args.max_gb:
    row["note"] = f"skipped (predicted {row['peak_gb']:.1f} GB)"
  else:
    times, cpu_times, losses = [], [], []
    for i in range(max(1, args.steps)):
      start, cpu_start = time.perf_counter(), time.process_time()
      params, opt_state, loss = compiled(params, opt_state, batch, jax.random.fold_in(step_rng, i))
      losses.append(float(jax.block_until_ready(loss)))
      times.append(time.perf_counter() - start)
      cpu_times.append(time.process_time() - cpu_start)
      if sum(times) > args.max_step_s:
        break
    # CPU seconds alongside wall seconds: on a shared machine they say what the step itself costs.
    row.update(timed_steps=len(times), step_s=sum(times) / len(times),
               step_cpu_s=sum(cpu_times) / len(times), losses=losses,
               tokens_per_s=args.batch * length * len(times) / sum(times))
    if not all(np.isfinite(losses)):
      row["note"] = "non-finite loss"
  row["max_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GB
  return row


def run_isolated(impl: str, length: int, argv: list[str]) -> dict:
  """One measurement in a fresh interpreter, so max RSS and the heap belong to it alone."""
  cmd = [sys.executable, os.path.abspath(__file__), *argv, f"--worker={impl},{length}"]
  proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
  for line in reversed(proc.stdout.splitlines()):
    if line.startswith("{"):
      return json.loads(line)
  # Killed (e.g. out of memory) or crashed: keep the row and say why instead of losing the sweep.
  tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
  return {"impl": impl, "length": length, "note": f"failed (exit {proc.returncode}): {tail[:120]}"}


def _fmt(value, spec: str) -> str:
  return "" if value is None else format(value, spec)


def markdown(rows: list[dict]) -> str:
  lines = ["| impl | L | temp GB | predicted peak GB | max RSS GB | compile s | step s (wall) "
           "| step CPU s | tokens/s | note |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
  for r in rows:
    lines.append(
        f"| {r['impl']} | {r['length']} | {_fmt(r.get('temp_gb'), '.3f')} | "
        f"{_fmt(r.get('peak_gb'), '.3f')} | {_fmt(r.get('max_rss_gb'), '.2f')} | "
        f"{_fmt(r.get('compile_s'), '.1f')} | {_fmt(r.get('step_s'), '.2f')} | "
        f"{_fmt(r.get('step_cpu_s'), '.1f')} | "
        f"{_fmt(r.get('tokens_per_s'), ',.0f')} | {r.get('note', '')} |")
  return "\n".join(lines)


def growth(rows: list[dict]) -> list[str]:
  """Peak memory at the longest length over that at a quarter of it, per implementation."""
  out = []
  for impl in dict.fromkeys(r["impl"] for r in rows):
    peaks = {r["length"]: r["peak_gb"] for r in rows if r["impl"] == impl and "peak_gb" in r}
    for longest in sorted(peaks, reverse=True):
      if longest // 4 in peaks and longest % 4 == 0:
        out.append(f"{impl}: peak({longest}) / peak({longest // 4}) = "
                   f"{peaks[longest] / peaks[longest // 4]:.2f}")
        break
  return out


def main(argv: list[str]) -> None:
  args = parse_args(argv)
  if args.worker:
    impl, length = args.worker.split(",")
    print(json.dumps(measure(impl, int(length), args)), flush=True)
    return
  passthrough = [a for a in argv if not a.startswith("--worker")]
  rows = []
  for impl in args.impls.split(","):
    for length in (int(x) for x in args.lengths.split(",")):
      rows.append(run_isolated(impl, length, passthrough))
      r = rows[-1]
      print(f"{impl:>10} L={length:>6}: peak {_fmt(r.get('peak_gb'), '.3f')} GB, "
            f"{_fmt(r.get('tokens_per_s'), ',.0f')} tokens/s {r.get('note', '')}", flush=True)
  print()
  print(markdown(rows))
  for line in growth(rows):
    print(line)
  os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  with open(args.out, "w") as f:
    json.dump({"args": {k: v for k, v in vars(args).items() if k != "worker"}, "rows": rows}, f,
              indent=1)
  print(f"wrote {args.out}")


if __name__ == "__main__":
  main(sys.argv[1:])
