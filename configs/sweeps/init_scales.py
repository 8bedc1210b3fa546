r"""The pretraining theory's init-scale knobs on a Transformer (Anguita et al.; docs/theory.md, "From
diagonal networks to Transformers"): every arm fine-tunes its seed's SPT checkpoint, changed only at
the hand-off, so the arms differ in nothing else.

  python -m spt_jax.sweep --config=configs/sweeps/init_scales.py:synthetic --workdir=~/spt_runs/init_scales
  python -m spt_jax.sweep --config=configs/sweeps/init_scales.py:synthetic,data --workdir=~/spt_runs/init_scales
  python -m spt_jax.sweep --config=configs/sweeps/init_scales.py:pathfinder \
      --workdir=~/spt_runs/lra_plateau/pathfinder
  (Pathfinder shares the plateau study's SPT runs, configs/sweeps/lra_plateau.py, and its budgets)

Arms (`scales`, the default):
  spt               the hand-off as trained: the fresh readout at the model's own initialisation
  gamma_{0,0.1,1}   the readout re-drawn from N(0, γ²): the theory's γ_FT (init_from.gamma_ft)
  lambda_{-0.5,0.5} the theory's relative scale λ (init_from.relative_scale): loaded attention
                    × √(1+λ), loaded MLP and embeddings × √(1−λ), the sum of squares of an attention
                    and an MLP leaf of equal norm kept, as w² + v² = c is in a diagonal network
  c_{0.5,2}         the whole loaded encoder × c (init_from.rescale): the theory's absolute scale,
                    c² in its units (c scales w² + v² there), applied at the hand-off
  <arm>_to_cap      (Pathfinder; c_0.5's is c_0p5_to_cap) the arm again without the plateau rule,
                    to the 10,000-step cap, at the seeds where the rule stopped it at chance
                    (`TO_CAP_SEEDS`): no verdict rests on a run the rule stopped at chance
                    (docs/theory.md)
  spt_repeat        (Pathfinder) `spt`'s fine-tuning run again from its SPT checkpoint: the plateau
                    study's records keep no fine-tuning checkpoints, which PR and ENSD read, so
                    where `spt` was restored from them this run stands in; on the host that ran
                    `spt` it is the same run bit for bit, elsewhere it measures the host's drift
Arms (`data`): data{10,30}_spt and data{10,30}_gamma_{0,0.1,1}, fine-tuned on 10% and 30% of the
training split (a seeded subset, `train_examples`): the theory places γ_FT's benefit at intermediate
sample sizes (100% is the `scales` sweep). On Pathfinder their plateau rule counts patience only
once validation has passed 0.55 (the plateau study's `after_passing`, decided before their runs),
so a run still at chance trains on to the cap in one run. γ = 0.1 and γ = 1, which prediction 5
compares, run first, then γ = 0, then the model's own readout.

Budgets: Pathfinder's are the plateau study's (fine-tuning to its plateau, cap 10,000 steps);
the synthetic task's fine-tuning runs to a plateau too (cap 6,000 steps, validation every 250,
stops after 8 validations without 0.5 points of gain); its SPT phase is the `cpu` variant's.
"""
import os

from spt_jax.config_lib import load_module, sweep_config

SEEDS = (0, 1, 2)
GAMMAS = (0.0, 0.1, 1.0)
LAMBDAS = (-0.5, 0.5)
ABSOLUTE = (0.5, 2.0)
DATA_FRACTIONS = (0.1, 0.3)
TRAIN_SIZE = {"synthetic": 8_000, "pathfinder": 20_000}  # the `cpu` variants' training splits
# Seeds at which the plateau rule stopped an arm at chance, so that the arm runs once more to the
# cap there (added as those runs finish; the plateau study's `RUN_SEEDS` do the same).
TO_CAP_SEEDS = {"synthetic": {}, "pathfinder": {"c_0.5": (0, 1, 2)}}

SYNTHETIC_FINETUNE = ("finetune.num_steps=6000 finetune.eval_every_steps=250 "
                      "finetune.checkpoint_every_steps=250 finetune.stop_on_plateau.patience=8 "
                      "finetune.stop_on_plateau.min_delta=0.005")


def to_cap_name(arm: str) -> str:
  """`arm`'s run to the cap: c_0.5 -> c_0p5_to_cap (`run_seeds` keys are config fields, which take
  no dots)."""
  return f"{arm.replace('.', 'p')}_to_cap"


def _lra_plateau():
  return load_module(os.path.join(os.path.dirname(os.path.abspath(__file__)), "lra_plateau.py"))


def _arms(task: str, variant: str) -> list[str]:
  if task == "pathfinder":  # the plateau study's own SPT run, so its directory is shared
    plateau = _lra_plateau()
    spt, finetune = f"{plateau.pretrain(task)} {plateau.finetune(task)}", plateau.finetune(task)
    cap = plateau.finetune(task, plateau=False)
    # The smaller fine-tuning sets may sit at chance for longer: their rule counts patience only
    # once validation has left chance, so no run of theirs needs a second run to the cap.
    smaller = plateau.finetune(task, after_passing=True)
  else:
    spt = finetune = smaller = SYNTHETIC_FINETUNE
    cap = SYNTHETIC_FINETUNE.replace("stop_on_plateau.patience=8", "stop_on_plateau.patience=0")
  from_spt = (f"phases=finetune finetune.init_from.source={{workdir}}/spt/seed_{{seed}}/pretrain "
              f"{finetune}")
  gammas = {f"gamma_{g:g}": f"finetune.init_from.gamma_ft={g}" for g in GAMMAS}
  if variant == "data":
    from_spt = from_spt.replace(finetune, smaller)
    knobs = {"spt": ""} | gammas
    # The arms prediction 5 compares (γ = 0.1 against γ = 1) first, so that its verdict comes
    # before the other arms' runs; then the rest of the theory's γ, then the model's own readout.
    arms = [f"spt: {spt}"]
    for group in (("gamma_0.1", "gamma_1"), ("gamma_0",), ("spt",)):
      for fraction in DATA_FRACTIONS:
        n, prefix = int(fraction * TRAIN_SIZE[task]), f"data{round(100 * fraction)}"
        arms += [f"{prefix}_{name}: " + " ".join(filter(None, (
            from_spt, knobs[name], f"finetune.train_examples={n}"))) for name in group]
    return arms
  knobs = (gammas
           | {f"lambda_{lam:g}": f"finetune.init_from.relative_scale={lam}" for lam in LAMBDAS}
           | {f"c_{c:g}": f"finetune.init_from.rescale={c} finetune.init_from.rescale_paths=encoder"
              for c in ABSOLUTE})
  arms = [f"spt: {spt}"]
  for name, knob in knobs.items():
    arms.append(f"{name}: {from_spt} {knob}")
    if name in TO_CAP_SEEDS[task]:
      arms.append(f"{to_cap_name(name)}: {from_spt.replace(finetune, cap)} {knob}")
  return arms + ([f"spt_repeat: {from_spt}"] if task == "pathfinder" else [])


def get_config(arg=None):
  task, _, variant = (arg or "synthetic").partition(",")
  variant = variant or "scales"
  if task not in TRAIN_SIZE or variant not in ("scales", "data"):
    raise ValueError(f"configs/sweeps/init_scales.py takes 'task[,variant]' with task in "
                     f"{tuple(TRAIN_SIZE)} and variant 'scales' or 'data', got {arg!r}.")
  base = f"configs/{task}_spt.py:cpu"
  metrics = ("finetune.test_of_best.accuracy", "finetune.best_val.accuracy",
             "finetune.stopped_at_step")
  to_cap = {to_cap_name(name): seeds for name, seeds in TO_CAP_SEEDS[task].items()}
  return sweep_config(base=base, runs=_arms(task, variant), seeds=SEEDS, metrics=metrics,
                      run_seeds=to_cap if variant == "scales" else {},
                      title=f"{task} (cpu): init scales at the hand-off ({variant})",
                      output=f"init_scales_{variant}", steps_to=0.9 if task == "synthetic" else 0.6)
