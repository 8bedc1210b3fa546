r"""The LRA-at-CPU-scale study with every phase run to its plateau and compute counted
(docs/lra_cpu.md, "Plateau budgets"): ListOps and Pathfinder at the `cpu` variants of
configs/<task>_{spt,scratch}.py, the models and data of the fixed-budget study unchanged.

  python -m spt_jax.sweep --config=configs/sweeps/lra_plateau.py:pathfinder,a \
      --workdir=~/spt_runs/lra_plateau/pathfinder --processes=2
  (every stage alike, and for listops; scripts/lra_plateau_study.sh runs them all, in its order)
  'pathfinder,a+b': both stages' runs in one queue, a's first, so that no core waits for the last
  run of a to finish before b's start; the stages' own tables come from 'pathfinder,a' and
  'pathfinder,b' afterwards, which find their runs finished.

Stages (in stage_names' order, which the study's figures follow; each writes its table to
<workdir>/<stage>/, all of a task share runs):
  a  SPT vs from scratch vs compute-matched scratch (from scratch, fine-tuned for as many training
     FLOPs as the SPT run of the same seed spent on pretraining plus fine-tuning)
  b  from scratch with a built-in proximity bias: ALiBi, RoPE, and on Pathfinder their
     two-dimensional forms on the image grid (alibi2d: the bias grows with the grid distance;
     rope2d: axial RoPE, half the channels by row, half by column); and on Pathfinder 1D ALiBi
     once more without the plateau rule (scratch_alibi_to_cap): its seed 0 stopped at step 4,250
     still at chance, where plain scratch left chance only at ~3,000, so whether the rule cut off a
     later escape is measured rather than assumed; and on Pathfinder scratch without any position
     encoding (scratch_nopos), the control for what absolute positions alone give scratch; and
     on Pathfinder 2D RoPE fine-tuned for SPT's compute like scratch_matched
     (scratch_rope2d_matched, added 2026-12-06 before any of its runs): the only 2D arm that left
     chance was still gaining within the plateau rule's window at the 10,000-step cap; and on
     Pathfinder 2D ALiBi without the rule (scratch_alibi2d_to_cap, added 2026-12-07 before any of
     its runs): `qkvo` seed 1, stopped by the rule at chance at 3,500 steps, reached 60% at 4,500
     when run to the cap, so every arm the rule stopped at chance is run to the cap once; and on
     Pathfinder 1D RoPE without the rule at seed 4 (scratch_rope_to_cap, added 2026-12-07 before
     its run): the one seed of 1D RoPE that the rule stopped at chance (at 3,250 steps; seeds 0-3
     ran to the cap, so their runs without the rule would be the same runs)
  c  SPT with the same position options (fine-tuning's rule waits until validation accuracy has
     passed AFTER_PASSING, so that no arm stopped at chance needs a re-run to the cap)
  d  Pathfinder's ablations re-run under these budgets: hybrid init (qk, qkvo) and frozen attention;
     and (added 2026-12-07 before any of their runs) qkvo and both frozen arms once more without the
     plateau rule (`*_to_cap`): their first runs stopped at chance at 3,500 steps, where plain
     scratch leaves chance only at ~3,000 and 1D RoPE at ~5,000, so a late escape is measured
     rather than ruled out by the rule
  e  the fixed-budget verdicts the plateau could change (docs/lra_cpu.md's claims table): one
     layer, SPT vs scratch; SPT on the other data of the same kind (config.pretrain_data); its own
     arms' rule waits as stage c's does
  lr Pathfinder's fine-tuning learning rate, the same grid for both arms (Amos et al.'s 1e-4, 5e-4,
     1e-3; 5e-4 is every other stage's): whether SPT's gain over scratch survives giving each arm
     its best rate. SPT's arms fine-tune the `spt` arm's own pretraining checkpoint of the seed
     (their compute column counts fine-tuning only). ListOps' rate was searched at fixed budgets.
     The other rates' arms run to the 10,000-step cap without the plateau rule (changed
     2026-12-07, after the rule stopped two of SPT's 1e-4 runs at chance at 3,500 steps: a lower
     rate escapes later, and the rule cannot tell stuck from slow); 5e-4's are stage a's runs.
Seeds: 3 on ListOps, 5 on Pathfinder (one in three SPT seeds stayed at chance at 1,500 steps).

Budgets (every value here, for both arms alike; nothing was searched for either):
  pretraining  up to 20,000 steps on ListOps, 10,000 on Pathfinder (its masked loss was still
               falling at 1,500); validation every 500 steps; on Pathfinder it stops once validation
               masked loss has not improved by 0.005 nats in 4 validations (2,000 steps); on ListOps
               it runs to the cap (the first two ListOps SPT runs under that rule: one stopped at
               4,000 steps at the neighbour-syntax level, 2.557 nats, where the other, after as flat
               a stretch, fell to 2.43 by 11,000; decided before any ListOps fine-tuning result).
               The hand-off checkpoint is still chosen on masked accuracy (Amos et al.).
  fine-tuning  up to 10,000 steps; validation every 250; on Pathfinder it stops once validation
               accuracy has not improved by 0.5 points in 12 validations (3,000 steps: longer than
               the chance plateau SPT's Pathfinder runs escaped from at 1,500 steps); on ListOps it
               runs to the cap (decided 2026-12-05, 20:20 UTC: of the first two ListOps SPT runs
               under that rule one was stopped at 4,250 steps at 33.8% while the other, as flat at
               that point (34.3%), climbed on to 38.4% at the cap, the pretraining rule's story
               again). The compute-matched arm runs its whole budget (no plateau rule).
"""
from spt_jax.config_lib import sweep_config

TASKS = ("listops", "pathfinder")
SEEDS = {"listops": (0, 1, 2), "pathfinder": (0, 1, 2, 3, 4)}
PRETRAIN_CAP = {"listops": 20_000, "pathfinder": 10_000}
# Fine-tuning learning rates of stage lr besides the configs' 5e-4 (Amos et al.'s grid).
OTHER_LEARNING_RATES = ("1e-4", "1e-3")
# Validation accuracy whose first fine-tuning step is reported (as in configs/sweeps/lra_cpu.py).
STEPS_TO = {"listops": 0.30, "pathfinder": 0.60}
# Test accuracy of guessing (ListOps: 10 classes; Pathfinder: 2), as the study's figures draw it.
CHANCE = {"listops": 0.1, "pathfinder": 0.5}

# ListOps runs each phase to its cap: its masked loss can sit within 0.005 nats for 2,000 steps at
# the neighbour-syntax level and then fall again, and its fine-tuning accuracy within 0.5 points for
# 3,000 steps and then climb (docs/lra_cpu.md, "Plateau budgets").
PRETRAIN_PATIENCE = {"listops": 0, "pathfinder": 4}
FINETUNE_PATIENCE = {"listops": 0, "pathfinder": 12}
# Arms run at some seeds only (the sweep's `run_seeds`): a re-run to the cap of the seeds that the
# plateau rule stopped at chance, where the other seeds ran to the cap under the rule already.
# Stage d's `_to_cap` arms ran at each of seeds 0-2 before this rule existed; at seeds 3-4 only
# where the rule stopped their arm at chance (seeds added as those runs finish).
RUN_SEEDS = {"pathfinder": {"scratch_rope_to_cap": (4,), "qkvo_to_cap": (0, 1, 2),
                            "spt_frozen_attention_to_cap": (0, 1, 2, 4),
                            "scratch_frozen_attention_to_cap": (0, 1, 2, 4)},
             "listops": {}}
# Validation accuracy that the fine-tuning rule of stages c's and e's own arms waits for before it
# counts patience (decided 2026-12-07, before any of their runs): a run still at chance trains to the
# cap in one run, where the earlier stages' arms were re-run to the cap (`_to_cap`) after the rule
# stopped them at chance. Pathfinder's validation split sits at 0.52 at chance.
AFTER_PASSING = {"listops": None, "pathfinder": 0.55}


def finetune(task: str, plateau: bool = True, after_passing: bool = False) -> str:
  """Fine-tuning's budget; `plateau=False`: its whole cap whatever the task (compute-matched);
  `after_passing`: the rule counts patience only past the task's AFTER_PASSING level."""
  patience = FINETUNE_PATIENCE[task] if plateau else 0
  level = AFTER_PASSING[task] if patience and after_passing else None
  return ("finetune.num_steps=10000 finetune.eval_every_steps=250 "
          f"finetune.checkpoint_every_steps=250 finetune.stop_on_plateau.patience={patience} "
          "finetune.stop_on_plateau.min_delta=0.005"
          + (f" finetune.stop_on_plateau.after_passing={level}" if level is not None else ""))


def pretrain(task: str) -> str:
  rule = (f"pretrain.stop_on_plateau.patience={PRETRAIN_PATIENCE[task]} "
          "pretrain.stop_on_plateau.min_delta=0.005 pretrain.stop_on_plateau.metric=loss"
          if PRETRAIN_PATIENCE[task] else "pretrain.stop_on_plateau.patience=0")
  return (f"pretrain.num_steps={PRETRAIN_CAP[task]} pretrain.eval_every_steps=500 "
          f"pretrain.checkpoint_every_steps=500 {rule}")


def positions(task: str) -> tuple[str, ...]:
  """The built-in proximity biases of stages b and c: 1D everywhere, 2D on images."""
  return ("alibi", "rope") + (("alibi2d", "rope2d") if task == "pathfinder" else ())


def _stages(task: str) -> dict:
  to_cap = lambda spec: spec.replace(finetune(task), finetune(task, plateau=False))
  spt = f"{pretrain(task)} {finetune(task)}"
  scratch = f"config=configs/{task}_scratch.py:cpu {finetune(task)}"
  from_spt = (f"phases=finetune finetune.init_from.source={{workdir}}/spt/seed_{{seed}}/pretrain "
              f"{finetune(task)}")
  matched = (f"config=configs/{task}_scratch.py:cpu {finetune(task, plateau=False)} "
             "finetune.match_compute_of={workdir}/spt/seed_{seed}")
  # Stages c's and e's own arms: the rule waits until validation accuracy has left chance.
  spt_waits = f"{pretrain(task)} {finetune(task, after_passing=True)}"
  scratch_waits = f"config=configs/{task}_scratch.py:cpu {finetune(task, after_passing=True)}"
  a = [f"spt: {spt}", f"scratch: {scratch}", f"scratch_matched: {matched}"]
  stages = {
      "a": dict(runs=a, title=f"{task} (cpu, plateau budgets): SPT vs from scratch vs "
                              f"compute-matched scratch"),
      "b": dict(runs=[f"scratch: {scratch}"] + [f"scratch_{p}: {scratch} model.position={p}"
                                                for p in positions(task)]
                + ([f"scratch_nopos: {scratch} model.position=none",
                    f"scratch_alibi_to_cap: config=configs/{task}_scratch.py:cpu "
                    f"{finetune(task, plateau=False)} model.position=alibi",
                    f"scratch_alibi2d_to_cap: config=configs/{task}_scratch.py:cpu "
                    f"{finetune(task, plateau=False)} model.position=alibi2d",
                    f"scratch_rope2d_matched: {matched} model.position=rope2d",
                    f"scratch_rope_to_cap: config=configs/{task}_scratch.py:cpu "
                    f"{finetune(task, plateau=False)} model.position=rope"]
                   if task == "pathfinder" else []),
                title=f"{task} (cpu, plateau budgets): from scratch with a proximity bias"),
      "c": dict(runs=[f"spt: {spt}"] + [f"spt_{p}: {spt_waits} model.position={p}"
                                        for p in positions(task)],
                title=f"{task} (cpu, plateau budgets): SPT with a proximity bias"),
      "d": dict(runs=[f"spt: {spt}", f"qk: {from_spt} finetune.init_from.include=qk",
                      f"qkvo: {from_spt} finetune.init_from.include=qkvo",
                      f"spt_frozen_attention: {from_spt} finetune.freeze=attention",
                      f"scratch: {scratch}",
                      f"scratch_frozen_attention: {scratch} finetune.freeze=attention"]
                + ([f"qkvo_to_cap: {to_cap(from_spt)} finetune.init_from.include=qkvo",
                    f"spt_frozen_attention_to_cap: {to_cap(from_spt)} finetune.freeze=attention",
                    f"scratch_frozen_attention_to_cap: {to_cap(scratch)} "
                    "finetune.freeze=attention"] if task == "pathfinder" else []),
                title=f"{task} (cpu, plateau budgets): loaded and frozen attention"),
      "e": dict(runs=[f"spt: {spt}", f"scratch: {scratch}",
                      f"spt_1L: {spt_waits} model.num_layers=1",
                      f"scratch_1L: {scratch_waits} model.num_layers=1",
                      f"spt_other_data: {spt_waits} pretrain.data=pretrain_data"],
                title=f"{task} (cpu, plateau budgets): one layer, and SPT on other data"),
  }
  if task == "pathfinder":
    stages["lr"] = dict(
        runs=[f"spt: {spt}", f"scratch: {scratch}"]
        + [f"spt_lr{lr}: {to_cap(from_spt)} finetune.learning_rate={lr}"
           for lr in OTHER_LEARNING_RATES]
        + [f"scratch_lr{lr}: {to_cap(scratch)} finetune.learning_rate={lr}"
           for lr in OTHER_LEARNING_RATES],
        title=f"{task} (cpu, plateau budgets): fine-tuning learning rate, both arms alike")
  return stages


def _union(task: str, stages: list[str]) -> dict:
  """Several stages' runs as one sweep, in stage order, each run once: a run that two stages share
  (e.g. `scratch`) is the same run directory, so it must be the same spec."""
  runs = {}
  for stage in stages:
    for spec in _stages(task)[stage]["runs"]:
      name = spec.partition(":")[0]
      if runs.setdefault(name, spec) != spec:
        raise ValueError(f"stages {'+'.join(stages)} of {task} give run {name!r} two specs.")
  return dict(runs=list(runs.values()),
              title=f"{task} (cpu, plateau budgets): stages {', '.join(stages)} in one queue")


def stage_names(task: str) -> tuple[str, ...]:
  """The task's stages, in the order tables and figures list them (scripts/lra_plateau_study.sh
  decides the order they run in)."""
  return tuple(_stages(task))


def get_config(arg=None):
  task, _, stage = (arg or "").partition(",")
  stages = stage.split("+")
  if task not in TASKS or not all(s in _stages(task) for s in stages):
    raise ValueError(f"configs/sweeps/lra_plateau.py takes 'task,stage' with task in {TASKS} and "
                     f"stage in {stage_names('pathfinder')} (lr: Pathfinder only) or several "
                     f"joined by '+' (e.g. 'a+b'), got {arg!r}.")
  s = _stages(task)[stage] if len(stages) == 1 else _union(task, stages)
  names = {spec.partition(":")[0] for spec in s["runs"]}
  return sweep_config(base=f"configs/{task}_spt.py:cpu", runs=s["runs"], seeds=SEEDS[task],
                      run_seeds={n: v for n, v in RUN_SEEDS[task].items() if n in names},
                      title=s["title"], output=stage, steps_to=STEPS_TO[task],
                      metrics=("finetune.test_of_best.accuracy", "finetune.best_val.accuracy",
                               "finetune.stopped_at_step"))
