"""Issue 21: a run that cannot fit stops before its first step, one that would take days says so,
and per-layer rematerialisation changes memory only (values and parameter paths stay)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import load_config, tiny
from spt_jax import config_lib, experiment, platform, preflight, tree
from spt_jax.models import transformer

TOKENS = (np.arange(4 * 64).reshape(4, 64) * 7 % 13 + 3).astype(np.int32)
TOKENS[:, 50:] = 0  # padding, excluded from attention and pooling


def _model(remat, **overrides):
  fields = dict(vocab_size=16, max_length=64, head="mlm", num_layers=2, d_model=32, num_heads=2,
                d_ff=64, dropout_rate=0.1, attention="dense", remat=remat)
  fields.update(overrides)
  return transformer.build(**fields)


def _loss(model):
  def loss(params, tokens):
    logits = model.apply({"params": params}, tokens, train=True,
                         rngs={"dropout": jax.random.PRNGKey(3)})
    return jnp.mean(jax.nn.log_softmax(logits)[..., 5] * (tokens != 0))
  return loss


def test_layer_remat_keeps_parameter_paths_loss_and_gradients():
  plain, remat = _model("none"), _model("layer")
  params = plain.init(jax.random.PRNGKey(0), TOKENS[:1])["params"]
  remat_params = remat.init(jax.random.PRNGKey(0), TOKENS[:1])["params"]
  # Same paths, shapes and initial values: checkpoints stay interchangeable.
  assert tree.flatten(params).keys() == tree.flatten(remat_params).keys()
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(remat_params)):
    np.testing.assert_array_equal(a, b)
  (loss_a, grads_a), (loss_b, grads_b) = (
      jax.jit(jax.value_and_grad(_loss(m)), compiler_options=platform.step_compiler_options(
          m.cfg.remat))(params, TOKENS) for m in (plain, remat))
  np.testing.assert_allclose(loss_a, loss_b, rtol=1e-6)
  for path, g in tree.flatten(grads_a).items():
    np.testing.assert_allclose(g, tree.flatten(grads_b)[path], rtol=1e-5, atol=1e-7, err_msg=path)


def test_layer_remat_shrinks_the_compiled_steps_temporaries():
  """On XLA:CPU this needs `step_compiler_options` (without it, CSE undoes the recomputation and
  the temporaries are the same with and without remat)."""
  temps = {}
  for remat in transformer.REMATS:
    model = _model(remat, num_layers=4, d_ff=512, dropout_rate=0.0, max_length=256)
    tokens = np.tile(TOKENS, (2, 4))  # [8, 256]
    params = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), tokens[:1])["params"])
    step = jax.jit(jax.grad(_loss(model)),
                   compiler_options=platform.step_compiler_options(remat))
    temps[remat] = step.lower(params, tokens).compile().memory_analysis().temp_size_in_bytes
  assert temps["layer"] < 0.6 * temps["none"], temps


def test_remat_is_validated():
  config = load_config("synthetic_spt", "smoke")
  config.model.remat = "layers"
  with pytest.raises(ValueError, match=r"config\.model\.remat='layers' must be one of"):
    config_lib.validate(config, 1)


def test_a_step_that_cannot_fit_stops_the_run_before_it_runs(tmp_path, cache_dir, monkeypatch):
  config = tiny(load_config("listops_spt"), cache_dir)
  monkeypatch.setattr(platform, "available_memory", lambda devices: (2**10, "test memory"))
  monkeypatch.setattr(preflight, "ESTIMATE_BUDGET_S", 600.0)  # a loaded machine compiles slowly
  with pytest.raises(preflight.StepMemoryError) as raised:
    experiment.run(config, str(tmp_path))
  message = str(raised.value)
  assert isinstance(raised.value, ValueError) and isinstance(raised.value, MemoryError)
  assert message.startswith("[pretrain] the train step needs "), message
  assert "1 KB of test memory is free" in message, message
  # Every remedy of this config, each with a compiled estimate.
  for flag in ("--config.model.remat=layer: ", "--config.pretrain.batch_size=4: ",
               "--config.model.attention=blockwise: ", "--config.model.dtype=bfloat16: "):
    line = next((l for l in message.splitlines() if flag in l), None)
    assert line is not None and "does not fit" in line and "not estimated" not in line, message
  latest = tmp_path / "pretrain" / "checkpoints" / "latest"
  assert not latest.exists() or not any(latest.iterdir())  # no step was trained or saved


def test_remedies_past_the_compile_budget_are_estimated_or_named():
  memory = preflight.StepMemory(arguments=2**28, outputs=2**20, aliased=2**20,
                                temporaries=24 * 2**30, devices=1)
  config = load_config("listops_spt")
  compiled = []
  with pytest.raises(preflight.StepMemoryError) as raised:
    preflight.check_step_memory(
        "pretrain", memory, jax.devices(), config, 2000,
        lambda remedy: compiled.append(remedy) or memory, compile_s=preflight.ESTIMATE_BUDGET_S + 1)
  assert not compiled
  lines = str(raised.value).splitlines()
  assert "24.0 GB" in lines[0]
  batch = next(l for l in lines if "--config.pretrain.batch_size=16" in l)
  assert "~12.0 GB (linear in the batch; not compiled)" in batch
  remat = next(l for l in lines if "--config.model.remat=layer" in l)
  assert "not estimated (a compilation takes" in remat


def test_remedies_follow_the_platforms_attention_choice(monkeypatch):
  """attention='auto' is whatever `platform.auto_attention` chooses for the model, asked with the
  ModelConfig the trainer builds, not worked out again here."""
  config = load_config("listops_spt")
  assert config.model.attention == "auto"
  asked = []
  for implementation, offered in (("dense", True), ("blockwise", False)):
    monkeypatch.setattr(platform, "auto_attention", lambda cfg, backend=None, i=implementation: (
        asked.append(cfg) or platform.AttentionChoice(i, None, "test")))
    flags = [r.flag for r in preflight.remedies(config, "pretrain", 2000, 1)]
    assert ("--config.model.attention=blockwise" in flags) == offered, flags
  assert asked[0] == transformer.from_section(config.model, max_length=2000)


def test_a_step_that_fits_passes(monkeypatch):
  memory = preflight.StepMemory(arguments=0, outputs=0, aliased=0, temporaries=2**30, devices=2)
  monkeypatch.setattr(platform, "available_memory", lambda devices: (3 * 2**30, "test memory"))
  preflight.check_step_memory("pretrain", memory, jax.devices(), load_config("listops_spt"), 2000,
                              None, compile_s=0.0)
  monkeypatch.setattr(platform, "available_memory", lambda devices: (None, "unknown"))
  preflight.check_step_memory("pretrain", memory, jax.devices(), load_config("listops_spt"), 2000,
                              None, compile_s=0.0)


def test_eta_warning_names_a_variant_sized_for_the_machine():
  config = load_config("listops_spt")
  argv = ["main.py", "--config=configs/listops_spt.py", "--workdir", "runs/lo",
          "--config.pretrain.num_steps=300000"]
  check = preflight.EtaCheck(config, "pretrain", 300_000, "runs/lo", argv=argv,
                             clock=lambda: 1_800_000_000.0)
  message = check(10, 0.05)
  assert "at 0.05 steps/s the remaining 299,990 steps take ~69 days" in message
  assert ("python main.py --config=configs/listops_spt.py --workdir=runs/lo_180steps "
          "--config.pretrain.num_steps=180 --config.pretrain.warmup_steps=18 "
          "--config.finetune.num_steps=180 --config.finetune.warmup_steps=18") in message
  assert check(20, 0.05) is None  # once
  fast = preflight.EtaCheck(config, "finetune", 1000, "runs/lo", argv=argv)
  assert fast(10, 1.0) is None


def test_the_trainer_checks_the_eta_once_after_its_first_steps(tmp_path, cache_dir, monkeypatch):
  config = tiny(load_config("listops_spt"), cache_dir, steps=12)
  for name in ("pretrain", "finetune"):
    config[name].update(log_every_steps=100, eval_every_steps=100, checkpoint_every_steps=100)
  calls = []

  class Recording(preflight.EtaCheck):
    def __call__(self, step, steps_per_sec):
      message = super().__call__(step, steps_per_sec)
      calls.append((self.name, step, message))
      return message

  monkeypatch.setattr(preflight, "ETA_WARNING_S", 0.0)
  monkeypatch.setattr(preflight, "EtaCheck", Recording)
  experiment.run(config, str(tmp_path))
  # Step 1 compiles; steps 2..6 are the probe; one warning per phase, naming its own variant.
  assert [(n, s) for n, s, _ in calls] == [("pretrain", 1 + preflight.ETA_PROBE_STEPS),
                                          ("finetune", 1 + preflight.ETA_PROBE_STEPS)]
  assert all("steps/s the remaining 6 steps take" in m for _, _, m in calls), calls
  assert "--config.finetune.num_steps=" in calls[1][2] and "pretrain" not in calls[1][2].split(
      "\n")[2]
