"""Freezing, hybrid initialisation and init-scale controls (the mechanism paper's ablations)."""
import os

import numpy as np
import pytest

from conftest import load_config, tiny
from spt_jax import checkpoints, experiment, optim, param_groups, tree


def _params(workdir, kind, phase="finetune"):
  d = os.path.join(workdir, phase, "checkpoints", kind)
  step = max(os.listdir(d), key=int)
  return tree.flatten(checkpoints.restore_item(os.path.join(d, step, "params")))


def _finetune(cache_dir, workdir, steps=1, **init_from):
  config = tiny(load_config("listops_scratch"), cache_dir, steps)
  config.finetune.init_from.update(init_from)
  experiment.run(config, str(workdir))
  return config


@pytest.fixture(scope="module")
def scratch_init(tmp_path_factory, cache_dir):
  workdir = tmp_path_factory.mktemp("scratch")
  _finetune(cache_dir, workdir)
  return _params(str(workdir), "init")


def test_frozen_attention_stays_bitwise_and_has_no_optimizer_moments(tmp_path, cache_dir):
  config = tiny(load_config("listops_scratch"), cache_dir, steps=50)
  config.finetune.freeze = ("attention",)
  config.finetune.weight_decay = 0.1  # would move the frozen kernels if it reached them
  experiment.run(config, str(tmp_path))
  start, end = _params(str(tmp_path), "init"), _params(str(tmp_path), "latest")
  attention = [p for p in start if "/attention/" in p]
  assert attention and all(np.array_equal(start[p], end[p]) for p in attention)
  others = [p for p in start if p not in attention]
  assert all(not np.array_equal(start[p], end[p]) for p in others)
  # The saved optimiser state holds moments for trainable leaves only.
  step = max(os.listdir(tmp_path / "finetune/checkpoints/latest"), key=int)
  opt_paths = tree.flatten(checkpoints.restore_item(
      str(tmp_path / "finetune/checkpoints/latest" / step / "opt_state")))
  assert not [p for p in opt_paths if "/attention/" in p]
  assert any("mlp/dense_in/kernel" in p for p in opt_paths)
  assert "| encoder/layer_0 |" in open(tmp_path / "finetune/parameters.md").read()


def test_frozen_leaves_get_no_moments_under_any_optimizer_settings():
  params = {"a": {"kernel": np.ones((3, 3), np.float32)}, "b": {"kernel": np.ones((3, 3), np.float32)}}
  for schedule, clip in (("constant", 0.0), ("cosine", 1.0), ("linear", 0.5)):
    cfg = load_config("listops_scratch").finetune
    cfg.update(schedule=schedule, grad_clip_norm=clip, warmup_steps=0)
    tx, _ = optim.make_optimizer(cfg, 10, params, frozenset({"a/kernel"}))
    state = tx.init(params)
    assert [p for p in tree.flatten(state) if p.endswith("a/kernel")] == []
    updates, _ = tx.update(params, state, params)
    assert not np.asarray(updates["a"]["kernel"]).any() and np.asarray(updates["b"]["kernel"]).any()


@pytest.mark.parametrize("preset,expected", [
    ("qk", r"attention/(query|key)/"), ("mlp", r"/mlp/")])
def test_hybrid_init_copies_exactly_the_preset(tmp_path, cache_dir, spt_run, scratch_init, preset,
                                               expected):
  import re
  source = os.path.join(spt_run[0], "pretrain")
  config = _finetune(cache_dir, tmp_path, source=source, include=(preset,))
  start = _params(str(tmp_path), "init")
  pretrained = _params(spt_run[0], "best", "pretrain")
  loaded = [p for p in start if re.search(expected, p)]
  assert loaded and all(np.array_equal(start[p], pretrained[p]) for p in loaded)
  rest = [p for p in start if p not in loaded]
  assert all(np.array_equal(start[p], scratch_init[p]) for p in rest)
  assert config.finetune.init_from.include == (preset,)


def test_gamma_ft_and_rescale(tmp_path, cache_dir, spt_run, scratch_init):
  source = os.path.join(spt_run[0], "pretrain")
  _finetune(cache_dir, tmp_path, source=source, include=("all_but_heads",), gamma_ft=0.0,
            rescale=0.5, rescale_paths=("mlp",))
  start = _params(str(tmp_path), "init")
  pretrained = _params(spt_run[0], "best", "pretrain")
  assert not start["classifier/kernel"].any()
  mlp = [p for p in start if "/mlp/" in p]
  assert all(np.array_equal(start[p], (pretrained[p] * 0.5).astype(start[p].dtype)) for p in mlp)
  assert np.array_equal(start["encoder/layer_0/attention/query/kernel"],
                        pretrained["encoder/layer_0/attention/query/kernel"])


@pytest.mark.parametrize("preset", ["attention", "qk", "mlp", "embeddings", "norms"])
def test_each_freeze_preset_runs(tmp_path, cache_dir, preset):
  config = tiny(load_config("listops_scratch"), cache_dir, steps=2)
  config.finetune.freeze = (preset,)
  results = experiment.run(config, str(tmp_path))
  assert results["finetune"]["steps"] == 2


def test_pattern_errors(tmp_path, cache_dir, spt_run):
  config = tiny(load_config("listops_scratch"), cache_dir, steps=2)
  config.finetune.freeze = ("encoder/layer_0/atention/.*",)
  with pytest.raises(ValueError, match=r"config.finetune.freeze: pattern .* matches no parameter.*"
                                       r"close matches: encoder/layer_0/attention"):
    experiment.run(config, str(tmp_path / "a"))
  with pytest.raises(ValueError, match="matches no parameter"):
    _finetune(cache_dir, tmp_path / "b", source=os.path.join(spt_run[0], "pretrain"),
              include=("encoder/nothing/.*",))


def test_init_from_errors(tmp_path, cache_dir, spt_run):
  source = os.path.join(spt_run[0], "pretrain")
  config = tiny(load_config("listops_scratch"), cache_dir, steps=1)
  config.model.d_ff = 48
  config.finetune.init_from.update(source=source, include=("mlp",))
  with pytest.raises(ValueError, match=r"encoder/layer_0/mlp/dense_in/bias: the model has \(48,\) "
                                       r"float32, checkpoint .* has \(32,\) float32"):
    experiment.run(config, str(tmp_path / "shape"))
  with pytest.raises(FileNotFoundError, match="init_from.source='/no/such/run'"):
    _finetune(cache_dir, tmp_path / "missing", source="/no/such/run")
  junk = tmp_path / "junk"
  junk.mkdir()
  (junk / "weights.txt").write_text("not a checkpoint")
  with pytest.raises(ValueError, match=f"{junk} is not an Orbax parameter checkpoint"):
    _finetune(cache_dir, tmp_path / "junk_run", source=str(junk))


def test_presets_expand_and_bare_strings_are_one_entry():
  assert param_groups.expand("qk") == list(param_groups.PRESETS["qk"])
  assert param_groups.expand(("mlp", "classifier/.*")) == [*param_groups.PRESETS["mlp"], "classifier/.*"]


def test_relative_scale_moves_scale_between_layer_groups_at_a_fixed_sum_of_squares():
  """The theory's λ on a Transformer: earlier × √(1+λ), later × √(1-λ), so that an earlier and a
  later leaf of equal norm keep the sum of their squared norms; combined with `rescale` per leaf."""
  import jax.numpy as jnp
  import ml_collections
  from spt_jax import init_from
  ones = lambda: jnp.ones((2, 2), jnp.float32)  # noqa: E731
  params = {"encoder": {"layer_0": {"attention": {"query": {"kernel": ones()}},
                                    "mlp": {"dense_0": {"kernel": ones()}}},
                        "token_embedding": {"embedding": ones()}},
            "classifier": {"kernel": ones()}}
  cfg = ml_collections.ConfigDict(dict(
      gamma_ft=-1.0, gamma_ft_paths=("classifier/kernel",), rescale=2.0, rescale_paths=("mlp",),
      relative_scale=-0.5, relative_scale_earlier=("attention",),
      relative_scale_later=("mlp", "embeddings")))
  out, report = init_from.apply_scales(params, cfg, None, phase="finetune")
  q = float(out["encoder"]["layer_0"]["attention"]["query"]["kernel"][0, 0])
  emb = float(out["encoder"]["token_embedding"]["embedding"][0, 0])
  mlp = float(out["encoder"]["layer_0"]["mlp"]["dense_0"]["kernel"][0, 0])
  assert q == pytest.approx(0.5 ** 0.5) and emb == pytest.approx(1.5 ** 0.5)
  assert q ** 2 + emb ** 2 == pytest.approx(2.0)
  assert mlp == pytest.approx(2.0 * 1.5 ** 0.5)
  assert float(out["classifier"]["kernel"][0, 0]) == 1.0
  assert report["relative_scale"]["lambda"] == -0.5
  cfg.relative_scale_later = ("attention",)
  with pytest.raises(ValueError, match="both select 'encoder/layer_0/attention/query/kernel'"):
    init_from.apply_scales(params, cfg, None, phase="finetune")
  cfg.relative_scale_later = ("nothing_here",)
  with pytest.raises(ValueError, match="relative_scale_later"):
    init_from.apply_scales(params, cfg, None, phase="finetune")


def test_the_embeddings_preset_is_the_input_layer_of_token_and_pixel_models():
  """A pixel model's input layer is its projection; without it a Pathfinder run's
  relative_scale_later=('mlp', 'embeddings') would match nothing and refuse to start."""
  from spt_jax import param_groups
  leaf = np.zeros(1)
  tokens = {"encoder": {"token_embedding": {"embedding": leaf}, "position_embedding": leaf,
                        "layer_0": {"mlp": {"dense_0": {"kernel": leaf}}}}}
  pixels = {"encoder": {"input_projection": {"kernel": leaf, "bias": leaf},
                        "layer_0": {"mlp": {"dense_0": {"kernel": leaf}}}}}
  assert param_groups.resolve("embeddings", tokens, what="t") == [
      "encoder/position_embedding", "encoder/token_embedding/embedding"]
  assert param_groups.resolve("embeddings", pixels, what="p") == [
      "encoder/input_projection/bias", "encoder/input_projection/kernel"]


@pytest.mark.parametrize("value", [-1.5, 1.01])
def test_a_relative_scale_outside_minus_one_to_one_is_refused_with_the_config_checks(value):
  from spt_jax import config_lib
  config = load_config("synthetic_spt")
  config.finetune.init_from.relative_scale = value
  with pytest.raises(ValueError, match=rf"config.finetune.init_from.relative_scale={value!r} must "
                                       r"be in \[-1, 1\]"):
    config_lib.validate(config, 1)
