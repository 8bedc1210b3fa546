r"""The run configs of the GraP sweeps: a task's GraP config with a loss set and, optionally,
fixed weights, both named in the variant.

  python main.py --config=configs/sweeps/grap_arms.py:markov,mscr --workdir=W
  python main.py --config=configs/sweeps/grap_arms.py:count,mscr,fixed=0.5/0.1/0.05/0.01 --workdir=W

  <task>     count (configs/synthetic_grap.py:count), markov (configs/markov_grap.py) or adjacency
             (configs/synthetic_grap.py, the documented negative result)
  <losses>   mlm (plain masked-token SPT through the composite), msr (mlm, span, random), mscr
             (mlm, span, contrastive, random); ms, mc, mr: mlm with one other loss
  fixed=w/.. weighting='fixed' with these weights on the raw losses, one per loss, in that order
  smoke      the task config's smoke sizes

Why a config and not sweep overrides: a sweep's overrides are recorded in each run's run_spec.json
and compared with the sweep's on every later invocation (spt_jax/sweep.py), after a JSON round trip
that turns a tuple into a list; a tuple-valued override (`pretrain.composite.losses=(...)`) thus
makes a sweep refuse its own runs when resumed, and a run shared between sweeps unusable. Named here,
every override of these sweeps is a scalar.
"""
from spt_jax import config_lib

TASKS = {"count": ("configs/synthetic_grap.py", ("count",)), "markov": ("configs/markov_grap.py", ()),
         "adjacency": ("configs/synthetic_grap.py", ())}
LOSS_SETS = {"mlm": ("mlm",), "ms": ("mlm", "span"), "mc": ("mlm", "contrastive"),
             "mr": ("mlm", "random"), "msr": ("mlm", "span", "random"),
             "mscr": ("mlm", "span", "contrastive", "random")}


def get_config(arg=None):
  items = [a for a in (arg or "").split(",") if a]
  options = dict(a.split("=", 1) for a in items if "=" in a)
  names = [a for a in items if "=" not in a]
  tasks = [n for n in names if n in TASKS]
  losses = [n for n in names if n in LOSS_SETS]
  unknown = sorted(set(names) - set(TASKS) - set(LOSS_SETS) - {"smoke"}) + sorted(
      set(options) - {"fixed"})
  if unknown or len(tasks) != 1 or len(losses) != 1:
    raise ValueError(f"configs/sweeps/grap_arms.py:{arg}: give one task of {sorted(TASKS)}, one "
                     f"loss set of {sorted(LOSS_SETS)}, optionally fixed=w1/w2/... and smoke"
                     f"{f'; unknown: {unknown}' if unknown else ''}.")
  path, variants = TASKS[tasks[0]]
  variants = variants + (("smoke",) if "smoke" in names else ())
  config = config_lib.load_config(path + (f":{','.join(variants)}" if variants else ""))
  composite = config.pretrain.composite
  composite.losses = LOSS_SETS[losses[0]]
  if "fixed" in options:
    weights = tuple(float(w) for w in options["fixed"].split("/"))
    if len(weights) != len(composite.losses):
      raise ValueError(f"configs/sweeps/grap_arms.py:{arg}: fixed= gives {len(weights)} weights "
                       f"for the {len(composite.losses)} losses {composite.losses}.")
    composite.update(weighting="fixed", fixed_weights=weights)
  return config
