r"""The LRA-at-CPU-scale study (docs/lra_cpu.md): SPT vs from scratch and Coser et al.'s ablations
on ListOps and Pathfinder, at the `cpu` variants of configs/<task>_{spt,scratch}.py.

  python -m spt_jax.sweep --config=configs/sweeps/lra_cpu.py:listops,spt_vs_scratch \
      --workdir=runs/lra_cpu/listops --processes=2
  (then hybrid_init, freezing, depth, pretrain_length, cross_task; the same for pathfinder)

All sweeps of a task share one workdir: the runs they have in common ('spt', 'scratch') run once, a
fine-tune-only arm starts from the 'spt' run's pretraining of the same seed, and each sweep writes
its table and plot to <workdir>/<sweep>/. Seeds: 3 for spt_vs_scratch; for the ablations 2 on
ListOps and 3 on Pathfinder, where SPT escapes the chance plateau in 2 of 3 seeds (seed 1 stays at
chance, so with seeds 0 and 1 only one seed could show what an ablation keeps of the gain).
"""
from spt_jax.config_lib import sweep_config

TASKS = ("listops", "pathfinder")
# Validation accuracy whose first fine-tuning step is reported: about 90% of what every arm of
# the spt_vs_scratch sweep reached (ListOps plateaus near 34%).
STEPS_TO = {"listops": 0.30, "pathfinder": 0.60}
# A fine-tuning from the 'spt' run's pretraining of the same seed (pretrained once per seed).
FROM_SPT = "phases=finetune finetune.init_from.source={workdir}/spt/seed_{seed}/pretrain"
# Pretraining lengths in steps; 'spt' is the cpu variant's default (1500 steps of batch 32).
PRETRAIN_STEPS = (300, 750, 1500, 3000)
ABLATION_SEEDS = {"listops": (0, 1), "pathfinder": (0, 1, 2)}


def _sweeps(task: str) -> dict:
  scratch = f"scratch: config=configs/{task}_scratch.py:cpu"
  return {
      "spt_vs_scratch": dict(runs=["spt:", scratch], seeds=(0, 1, 2),
                             title=f"{task} (cpu): SPT vs from scratch"),
      "hybrid_init": dict(
          runs=["spt:", f"qk: {FROM_SPT} finetune.init_from.include=qk",
                f"qkvo: {FROM_SPT} finetune.init_from.include=qkvo",
                f"mlp: {FROM_SPT} finetune.init_from.include=mlp", scratch],
          title=f"{task} (cpu): which SPT weights are loaded (spt = all but the heads, "
                f"scratch = none)"),
      "freezing": dict(
          runs=["spt:", f"spt_frozen_attention: {FROM_SPT} finetune.freeze=attention", scratch,
                f"{scratch} finetune.freeze=attention".replace("scratch:",
                                                               "scratch_frozen_attention:", 1)],
          title=f"{task} (cpu): attention frozen during fine-tuning"),
      "depth": dict(
          runs=["spt:", scratch, "spt_1L: model.num_layers=1",
                f"{scratch} model.num_layers=1".replace("scratch:", "scratch_1L:", 1)],
          title=f"{task} (cpu): one layer vs the variant's depth"),
      "pretrain_length": dict(
          runs=[scratch] + [f"spt_pt{n}: pretrain.num_steps={n}" if n != 1500 else "spt:"
                            for n in PRETRAIN_STEPS],
          title=f"{task} (cpu): fine-tune test accuracy vs SPT length"),
      "cross_task": dict(
          runs=["spt:", "spt_other_data: pretrain.data=pretrain_data", scratch],
          title=f"{task} (cpu): SPT on other data of the same kind (config.pretrain_data)"),
  }


def get_config(arg=None):
  task, _, name = (arg or "").partition(",")
  if task not in TASKS or name not in _sweeps(task):
    raise ValueError(f"configs/sweeps/lra_cpu.py takes 'task,sweep' with task in {TASKS} and "
                     f"sweep in {tuple(_sweeps('listops'))}, got {arg!r}.")
  s = _sweeps(task)[name]
  extra = {}
  if name == "pretrain_length":
    extra = dict(x_values=(0,) + PRETRAIN_STEPS, x_label="SPT steps (batch 32)")
  return sweep_config(base=f"configs/{task}_spt.py:cpu", runs=s["runs"],
                      seeds=s.get("seeds", ABLATION_SEEDS[task]), title=s["title"], output=name, steps_to=STEPS_TO[task],
                      **extra)
