"""docs/configs.md is generated from the LRA configs; a config that drifts from it (or from Amos et
al.'s published settings in tests/lra_published.py) fails here, so a changed default is a visible
change to the docs."""
import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lra_published
from conftest import load_script
from spt_jax import config_lib, optim
from spt_jax.models import transformer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _script():
  return load_script("config_table")


def test_docs_configs_md_is_generated_from_the_configs():
  with open(os.path.join(ROOT, "docs", "configs.md")) as f:
    committed = f.read()
  assert committed == _script().render(), (
      "docs/configs.md is stale: run `python scripts/config_table.py` and commit the result.")


def test_a_config_that_drifts_from_the_table_is_named():
  script = _script()
  spt, scratch = script.configs("pathfinder")
  spt.finetune.learning_rate = 1e-3
  problems = script.check_table_matches("pathfinder", spt)
  assert problems == ["configs/pathfinder_spt.py: config.finetune.learning_rate=0.001, the table "
                      "says 0.0005"]
  scratch.finetune.warmup_steps = 7
  assert any("finetune.warmup_steps=7" in p for p in script.check_scratch_matches(
      "pathfinder", script.configs("pathfinder")[0], scratch))


@pytest.mark.parametrize("task", list(lra_published.TASKS))
def test_every_config_holds_the_published_values(task):
  script = _script()
  spt, scratch = script.configs(task)
  assert script.check_table_matches(task, spt) == []
  assert script.check_scratch_matches(task, spt, scratch) == []
  published = spt.model.num_heads
  spt.model.num_heads = published * 2
  assert script.check_table_matches(task, spt) == [
      f"configs/{task}_spt.py: config.model.num_heads={published * 2}, the table says {published}"]


@pytest.mark.parametrize("task", list(lra_published.TASKS))
def test_every_table_entry_names_a_source(task):
  for key, entry in lra_published.TASKS[task].items():
    assert entry.source, (task, key)


_FILE_LINE = re.compile(r"[\w./-]+\.(?:py|yaml|md):[\d,-]+")


@pytest.mark.parametrize("task", list(lra_published.TASKS))
def test_every_published_source_is_cited_in_the_config_file(task):
  """The comments beside a config's values name the same file:line as the published table."""
  with open(os.path.join(ROOT, "configs", f"{task}_spt.py")) as f:
    text = f.read()
  entries = {key.format(phase=phase): entry for key, entry in lra_published.COMMON.items()
             for phase in ("pretrain", "finetune")}
  entries.update(lra_published.TASKS[task])
  missing = [(key, ref) for key, entry in entries.items()
             for ref in _FILE_LINE.findall(f"{entry.source} {entry.note}") if ref not in text]
  assert not missing, f"configs/{task}_spt.py cites none of: {missing}"


def test_issue_rows_hold_value_by_value():
  """The differences the LRA-config review found, each now equal to Amos et al.'s value."""
  cfg = {t: config_lib.load_config(f"configs/{t}_spt.py") for t in lra_published.TASKS}
  for task, c in cfg.items():
    wd = 0.1 if task == "text" else 0.0
    assert (c.pretrain.weight_decay, c.finetune.weight_decay) == (wd, wd), task
    assert c.pretrain.weight_decay_on == c.finetune.weight_decay_on == "all"
  warmups = {t: (c.pretrain.warmup_steps, c.finetune.warmup_steps) for t, c in cfg.items()}
  assert warmups == {"listops": (2000, 2000), "text": (5000, 2000), "retrieval": (2000, 5000),
                     "image": (2500, 2000), "pathfinder": (2500, 5000), "pathx": (5000, 5000)}
  heads = {t: (c.model.classifier, c.model.classifier_activation) for t, c in cfg.items()}
  assert heads["text"] == heads["image"] == ("mlp", "relu") and heads["retrieval"] == ("mlp", "gelu")
  assert {heads[t][0] for t in ("listops", "pathfinder", "pathx")} == {"linear"}
  assert cfg["image"].model.pooling == "mean" and cfg["pathx"].model.pooling == "max"
  assert cfg["pathfinder"].pretrain.pixel_loss == cfg["pathx"].pretrain.pixel_loss == "ce"
  assert cfg["image"].pretrain.pixel_loss == "l1"
  assert (cfg["image"].data.pixel_mean, cfg["image"].data.pixel_std) == (122.6, 61.0)
  assert (cfg["pathfinder"].data.pixel_mean, cfg["pathfinder"].data.pixel_std) == (127.5, 127.5)


def test_mlp_classifier_is_dense_activation_dense_on_the_pooled_vector():
  model = transformer.build(vocab_size=8, max_length=6, num_classes=3, classifier="mlp",
                                    classifier_activation="gelu", num_layers=1, d_model=8,
                                    num_heads=2, d_ff=16)
  x = jnp.array([[4, 5, 6, 0, 0, 0]])
  params = model.init(jax.random.PRNGKey(0), x)["params"]
  head = params["classifier"]
  assert head["hidden"]["kernel"].shape == (8, 8) and head["output"]["kernel"].shape == (8, 3)
  encoder = transformer.build(vocab_size=8, max_length=6, head="mlm", num_layers=1,
                                      d_model=8, num_heads=2, d_ff=16)
  h = encoder.apply({"params": {**params, "mlm_head": {"kernel": jnp.eye(8), "bias": jnp.zeros(8)}}},
                    x)[0, :3].mean(0)  # The encoder output through an identity head: mean-pooled.
  expected = jax.nn.gelu(h @ head["hidden"]["kernel"] + head["hidden"]["bias"])
  expected = expected @ head["output"]["kernel"] + head["output"]["bias"]
  np.testing.assert_allclose(model.apply({"params": params}, x)[0], expected, rtol=1e-5, atol=1e-6)


def test_pixels_enter_normalised_with_the_data_statistics():
  kw = dict(vocab_size=4, max_length=4, input_kind="pixels", num_layers=1, d_model=8, num_heads=2,
            d_ff=8)
  x = jnp.array([[0, 64, 128, 255]], jnp.uint8)
  plain = transformer.build(**kw)
  params = plain.init(jax.random.PRNGKey(0), x)["params"]
  shifted = transformer.build(**kw, pixel_mean=127.5, pixel_std=127.5)
  # (x - 127.5) / 127.5 = 2 * (x / 255) - 1: the same model on inputs mapped by hand.
  proj = params["encoder"]["input_projection"]
  twice = {**params, "encoder": {**params["encoder"], "input_projection": {
      "kernel": proj["kernel"] * jnp.array([[2.0], [1.0]]),
      "bias": proj["bias"] - proj["kernel"][0]}}}
  np.testing.assert_allclose(shifted.apply({"params": params}, x),
                             plain.apply({"params": twice}, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target, decayed", [("matrices", {"kernel"}), ("all", {"kernel", "bias"})])
def test_weight_decay_on_selects_what_decays(target, decayed):
  cfg = config_lib.phase_config("classification", learning_rate=1e-2, warmup_steps=0,
                                weight_decay=0.5, weight_decay_on=target)
  params = {"kernel": jnp.ones((2, 2)), "bias": jnp.ones(2)}
  tx, _ = optim.make_optimizer(cfg, 10, params)
  updates, _ = tx.update(jax.tree.map(jnp.zeros_like, params), tx.init(params), params)
  moved = {k for k, u in updates.items() if float(jnp.abs(u).max()) > 0}
  assert moved == decayed
