r"""Synthetic proximity task with span-masking self-pretraining.

  python main.py --config=configs/synthetic_span.py --workdir=runs/synthetic_span
  python main.py --config=configs/synthetic_span.py:smoke --workdir=/tmp/syn_span_smoke
  python main.py --config=configs/synthetic_span.py --workdir=W --config.pretrain.span_length=1

configs/synthetic_spt.py with `pretrain.objective='span'` (spt_jax/objectives/span.py): the same
15% of tokens masked, for the same steps, learning rate and warmup, but in contiguous spans of mean
length 3 (SpanBERT's geometric lengths; `span_length=1` masks positions independently, as mlm);
the same fine-tuning. A masked token's neighbours are more often masked too, so the arm tests how
much SPT's gain on this task rests on reading the adjacent tokens.
"""
from spt_jax import config_lib


def get_config(arg=None):
  config = config_lib.load_config("configs/synthetic_spt.py" + (f":{arg}" if arg else ""))
  config.pretrain = config_lib.switch_objective(config.pretrain, "span")
  config.pretrain.span_length = 3.0  # SpanBERT's mean span length is 3.8; 3 as the composite's span
  return config
