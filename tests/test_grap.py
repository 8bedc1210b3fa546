"""GraP loss weighting and composite SPT: the algorithm's maths, its dynamics, and one tiny phase.

The composite objective is spt_jax/objectives/composite.py, trained by the one phase trainer.
"""
from __future__ import annotations

import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from conftest import load_config
from spt_jax import checkpoints, experiment, grap, init_from, train, tree
from spt_jax.objectives import composite
from spt_jax.data import synthetic
from spt_jax.data.tasks import TaskData


# ---------------------------------------------------------------------------------------- helpers
def _toy_problem(seed=0, b=4, length=5, d=6, classes=3):
  """A fixed z, three heads (two cross-entropies, one quadratic) and a mean-pooled linear probe."""
  rng = np.random.default_rng(seed)  # numpy draws: nothing to compile
  z = jnp.asarray(rng.normal(size=(b, length, d)), jnp.float32)
  heads = [jnp.asarray(rng.normal(size=(d, n)), jnp.float32) for n in (7, classes)]
  targets = [jnp.asarray(rng.integers(0, n, (b, length))) for n in (7, classes)]
  quad_target = jnp.asarray(rng.normal(size=(b, length, d)), jnp.float32)
  probe = jnp.asarray(rng.normal(size=(d, 2)), jnp.float32)
  labels = jnp.asarray(rng.integers(0, 2, b))

  def ce(x, w, t):
    return optax.softmax_cross_entropy_with_integer_labels(x @ w, t).mean()

  losses = [lambda z: ce(z, heads[0], targets[0]), lambda z: ce(z, heads[1], targets[1]),
            lambda z: 0.5 * jnp.mean((z - quad_target) ** 2) * 10.0]
  downstream = lambda z: ce(z.mean(1), probe, labels)
  return z, losses, downstream


def _cos(a, b):
  a, b = np.ravel(a), np.ravel(b)
  return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


# ---------------------------------------------------------------------------------------- algorithm
def test_logit_update_is_the_lookahead_hypergradient():
  """GraP's ascent direction on pᵀw(l) equals −d/dl L_down(z − η Σ_i w_i(l) g_i) as η → 0.

  Conventions that make the two comparable: the look-ahead steps along the same normalised
  gradients g_i = ∇L_i / m_i that GraP sends to the encoder (on the first update m_i = ||∇L_i||), and
  w(l) = |l| / sqrt(|l|ᵀ C |l|) with C the cosine matrix of those g_i, differentiated through in both.
  GraP's p uses the unit downstream gradient: that rescales the hypergradient by 1/||∇L_down||, a
  positive factor that leaves the direction unchanged.
  """
  z, losses, downstream = _toy_problem()
  grads, down = jax.jit(lambda z: (jnp.stack([jax.grad(f)(z) for f in losses]),
                                  jax.grad(downstream)(z)))(z)
  weighting = grap.Weighting("grap", len(losses), ema=0.9, warmup=10)
  state = weighting.init()
  logits = jnp.array([1.0, 0.4, 1.7])  # Not all equal, so the direction is not degenerate.
  state["logits"] = logits
  new_state, z_grad, coef, info = jax.jit(weighting)(state, grads, jnp.zeros(3), down,
                                                     jnp.asarray(True))

  g = grads / jnp.linalg.norm(grads.reshape(3, -1), axis=1)[:, None, None, None]
  cos = jnp.einsum("i...,j...->ij", g, g)
  eta = 1e-4

  def lookahead(l):
    return downstream(z - eta * jnp.tensordot(grap.weights(l, cos), g, 1))

  hyper = -jax.jit(jax.grad(lookahead))(logits)
  cosine = _cos(info["direction"], hyper)
  print(f"hypergradient cosine: {cosine:.6f}")
  assert cosine > 0.99
  # Central finite differences of the look-ahead loss agree too (in float64: the look-ahead changes
  # L_down by ~η·h, below float32 resolution).
  with jax.enable_x64(True):
    z64, cos64, g64 = (jnp.asarray(np.asarray(x), jnp.float64) for x in (z, cos, g))
    ahead = jax.jit(jax.vmap(
        lambda l: downstream(z64 - eta * jnp.tensordot(grap.weights(l, cos64), g64, 1))))
    h = 1e-4 * np.eye(3)
    values = np.asarray(ahead(jnp.asarray(np.concatenate([logits + h, logits - h]), jnp.float64)))
    fd = (values[:3] - values[3:]) / 2e-4
  assert _cos(info["direction"], -fd) > 0.99
  # The step taken is Σ w_i g_i with unit norm, and the heads' coefficients are w_i / m_i.
  np.testing.assert_allclose(jnp.linalg.norm(z_grad), 1.0, rtol=1e-5)
  np.testing.assert_allclose(coef * jnp.linalg.norm(grads.reshape(3, -1), axis=1), info["weight"],
                             rtol=1e-5)
  # Ascent: the logits move along the direction (Adam with b1 = 0 keeps each component's sign).
  np.testing.assert_array_equal(np.sign(new_state["logits"] - logits), np.sign(info["direction"]))


def test_statistics_warm_up_then_follow_an_ema():
  prev, new = jnp.array(2.0), jnp.array(4.0)
  assert grap.smooth(prev, new, jnp.array(0), 0.9, 10) == 4.0            # first: the value
  np.testing.assert_allclose(grap.smooth(prev, new, jnp.array(3), 0.9, 10), (2 * 3 + 4) / 4)
  np.testing.assert_allclose(grap.smooth(prev, new, jnp.array(10), 0.9, 10), 0.9 * 2 + 0.1 * 4)


def test_grap_drives_an_unaligned_loss_weight_down():
  """Three losses whose gradients share direction with the downstream gradient (cosine 0.2-0.3, at
  very different scales) and one whose gradient is independent noise, fresh every step: with the
  default settings (Adam 0.01, betas (0, 0.99), EMA 0.9, 10 warm-up updates) the noise loss falls
  below 5% of the largest weight within a bounded number of steps, and the aligned ones keep theirs."""
  weighting = grap.Weighting("grap", 4)
  cosines = jnp.array([0.3, 0.2, 0.3, 0.0])
  scales = jnp.array([1.0, 10.0, 0.1, 5.0])

  def step(state, key):
    kd, kn = jax.random.split(key)
    d = jax.random.normal(kd, (256,))
    d = d / jnp.linalg.norm(d)
    noise = jax.random.normal(kn, (4, 256)) / 16.0
    g = (cosines[:, None] * d + jnp.sqrt(1 - cosines[:, None] ** 2) * noise) * scales[:, None]
    state, _, _, info = weighting(state, g, jnp.zeros(4), 3.0 * d, jnp.asarray(True))
    return state, info["weight"]

  _, history = jax.jit(lambda s, k: jax.lax.scan(step, s, k))(
      weighting.init(), jax.random.split(jax.random.PRNGKey(0), 400))
  history = np.asarray(history)
  below = np.flatnonzero(history[:, 3] < 0.05 * history.max(1))
  print(f"unaligned loss below 5% of the largest weight from step {below[0] + 1}")
  assert below.size and below[0] + 1 <= 300
  assert (history[-1, :3] > 0.3).all()


def test_baselines():
  g = jnp.array([[1.0, 0.0], [-1.0, 1.0]])
  projected, conflicts = grap.pcgrad(g, jax.random.PRNGKey(0))
  # g0 loses its component along g1 and vice versa; the result conflicts with neither.
  np.testing.assert_allclose(projected, [0.5 + 0.0, 0.5 + 1.0], atol=1e-6)
  assert conflicts.tolist() == [1, 1]
  assert all(float(projected @ gi) >= 0 for gi in g)
  weighting = grap.Weighting("gradnorm", 2, gradnorm_lr=0.1)
  grads = jnp.stack([jnp.ones(4), 10 * jnp.ones(4)])
  step = lambda state, _: (weighting(state, grads, jnp.array([1.0, 1.0]))[0], None)
  state, _ = jax.jit(lambda s: jax.lax.scan(step, s, length=20))(weighting.init())
  # Equal training rates: GradNorm moves towards equal weighted gradient norms, sum kept at K.
  assert state["weights"][0] > state["weights"][1]
  np.testing.assert_allclose(state["weights"].sum(), 2.0, rtol=1e-5)
  fixed = grap.Weighting("fixed", 2, fixed=(0.25, 2.0))
  _, z_grad, coef, _ = fixed({}, grads, jnp.zeros(2))
  np.testing.assert_allclose(z_grad, 0.25 + 20.0)
  with pytest.raises(ValueError, match="needs 2 fixed weights"):
    grap.Weighting("fixed", 2, fixed=(1.0,))


# ---------------------------------------------------------------------------------------- losses
def test_span_mask_and_random_targets():
  tokens = jnp.full((64, 200), 5).at[:, -20:].set(0)  # 20 pads at the end of every row
  mask = jax.jit(composite.span_mask, static_argnums=(2, 3))(jax.random.PRNGKey(0), tokens, 0.15,
                                                            3.0)
  assert not mask[:, -20:].any()
  coverage = float(mask[:, :-20].mean())
  assert 0.10 < coverage < 0.17, coverage
  row = np.asarray(mask[:, :-20]).astype(int)
  runs = [len(r) for line in row for r in "".join(map(str, line)).split("0") if r]
  assert 2.3 < np.mean(runs) < 3.7  # overlapping spans merge, so slightly above 3 is fine
  a = jax.jit(composite.random_targets, static_argnums=(1, 2, 3))(jnp.array([0, 1, 0]), 10, 16, 0)
  np.testing.assert_array_equal(a[0], a[2])  # a function of (seed, index, position) only
  assert (a[0] != a[1]).any() and int(a.max()) < 16


def test_label_fraction_hides_the_other_labels():
  arrays = {"inputs": np.zeros((10, 4), np.uint8), "labels": np.ones(10, np.int32)}
  task = TaskData("t", synthetic.vocabulary(4), 2, 4, {"train": arrays, "val": arrays}, "test")
  splits = composite.prepare_splits(task, grap.Weighting("grap", 2), 0.3)
  assert splits["train"]["label_weights"].tolist() == [1] * 3 + [0] * 7
  assert splits["train"]["labels"].tolist() == [1] * 3 + [0] * 7
  assert splits["val"]["label_weights"].all()
  plain = composite.prepare_splits(task, grap.Weighting("uniform", 2), 0.3)
  assert "labels" not in plain["train"]  # no downstream signal: labels are never read


def test_configs_and_validation():
  for name in ("synthetic_grap", "synthetic_uniform"):
    for arg in ("smoke", "cpu"):
      config = load_config(name, arg)
      composite.validate_phase(config.pretrain, "pretrain")
      assert config.finetune.init_from.exclude == ("pretrain_heads/.*",)
  assert load_config("synthetic_uniform", "cpu").pretrain.composite.weighting == "uniform"
  listops = load_config("listops_grap", "smoke")
  composite.validate_phase(listops.pretrain, "pretrain")
  assert listops.pretrain.num_steps == 60 and listops.data.max_length == 128
  config = load_config("synthetic_grap", "smoke")
  for key, value, message in [("losses", ("mlm", "bogus"), "composite.losses"),
                              ("weighting", "nope", "composite.weighting"),
                              ("temperature", 0.0, "composite.temperature")]:
    bad = load_config("synthetic_grap", "smoke")
    bad.pretrain.composite[key] = value
    with pytest.raises(ValueError, match=message):
      composite.validate_phase(bad.pretrain, "pretrain")
  config.pretrain.grap.label_fraction = 0.0
  with pytest.raises(ValueError, match="grap.label_fraction"):
    composite.validate_phase(config.pretrain, "pretrain")


# ---------------------------------------------------------------------------------------- phase
def test_composite_phase_hands_its_encoder_to_the_finetune(tmp_path):
  config = load_config("synthetic_grap", "smoke")
  config.phases = "pretrain"  # The fine-tune's loading is checked below without training it.
  config.data.synthetic.update(length=24, num_train=128, num_val=32, num_test=32)
  config.data.max_length = 24
  config.model.update(d_model=16, num_heads=2, d_ff=32)
  config.pretrain.update(num_steps=30, batch_size=16, eval_every_steps=30,
                         checkpoint_every_steps=30, log_every_steps=10)
  config.pretrain.composite.log_weights_every = 5
  pre = experiment.run(config, str(tmp_path))["pretrain"]

  losses = ("mlm", "span", "contrastive", "random")
  assert pre["weighting"] == "grap" and tuple(pre["final_weights"]) == losses
  assert pre["selection_metric"] == "mlm_accuracy" and pre["steps_per_sec"] > 0
  for key in ("mlm_accuracy", "span_accuracy", "contrastive_accuracy", "random_loss",
              "grap_probe_accuracy"):
    assert np.isfinite(pre["test_of_best"][key]), key
  phase = tmp_path / "pretrain"
  rows = [json.loads(l) for l in open(phase / "metrics.jsonl")]
  weights = [r for r in rows if r["split"] == "weights"]
  assert [r["step"] for r in weights] == [5, 10, 15, 20, 25, 30]
  for r in weights:
    assert all(r[n] >= 0 and f"align_{n}" in r and f"logit_{n}" in r for n in losses)
  assert os.path.getsize(phase / "weights.png") > 1000
  for kind in ("latest", "best", "init"):
    assert os.listdir(phase / "checkpoints" / kind)

  # The fine-tune's init_from (source=pretrain, exclude pretrain_heads/.*) into the classifier:
  # every encoder array loads with matching shapes, the heads stay behind, the classifier is fresh.
  task = TaskData("synthetic", synthetic.vocabulary(16), 2, 24, {}, "test")
  objective = train.make_objective(config, "finetune", task)
  params = jax.jit(objective.init_params)(jax.random.PRNGKey(0), jnp.zeros((1, 24), jnp.int32))
  loaded, report = init_from.load_into(params, config.finetune.init_from, workdir=str(tmp_path),
                                       phase_names=["pretrain", "finetune"], phase="finetune")
  assert report["fresh"] == ["classifier/bias", "classifier/kernel"]
  assert sorted(report["loaded"]) == sorted(p for p in tree.flatten(params) if p != "classifier/bias"
                                            and p != "classifier/kernel")
  assert report["ignored"] and all(p.startswith("pretrain_heads/") for p in report["ignored"])
  assert "pretrain_heads/grap_probe/kernel" in report["ignored"]
  best = checkpoints.restore_item(pre["selected_checkpoint"])
  np.testing.assert_array_equal(tree.flatten(loaded)["encoder/final_norm/scale"],
                                best["encoder"]["final_norm"]["scale"])


def test_interrupted_composite_phase_resumes_bit_identically(tmp_path,
                                                             monkeypatch):
  def config():
    c = load_config("synthetic_grap", "smoke")
    c.phases = "pretrain"
    c.data.synthetic.update(length=16, num_train=64, num_val=16, num_test=16)
    c.data.max_length = 16
    c.model.update(d_model=16, num_heads=2, d_ff=32)
    c.pretrain.update(num_steps=20, batch_size=16, eval_every_steps=10, checkpoint_every_steps=10,
                      log_every_steps=5)
    c.pretrain.composite.log_weights_every = 5
    return c

  reference = experiment.run(config(), str(tmp_path / "reference"))["pretrain"]

  original = train.make_steps

  def crashing_make_steps(*args):
    step, evaluate = original(*args)

    def crash_after_first_checkpoint(state, *rest):
      if int(state.step) == 13:
        raise KeyboardInterrupt("simulated crash")
      return step(state, *rest)
    crash_after_first_checkpoint.lower = step.lower  # The trainer's memory check compiles through it.
    return crash_after_first_checkpoint, evaluate
  workdir = str(tmp_path / "interrupted")
  monkeypatch.setattr(train, "make_steps", crashing_make_steps)
  with pytest.raises(KeyboardInterrupt):
    experiment.run(config(), workdir)
  latest = os.path.join(workdir, "pretrain", "checkpoints", "latest")
  deadline = time.time() + 60  # The crashed run's asynchronous save of step 10 may still be writing.
  while "10" not in os.listdir(latest) and time.time() < deadline:
    time.sleep(0.05)
  assert max(os.listdir(latest), key=int) == "10"
  monkeypatch.setattr(train, "make_steps", original)
  resumed = experiment.run(config(), workdir)["pretrain"]

  assert resumed["test_of_best"] == reference["test_of_best"]
  assert resumed["final_weights"] == reference["final_weights"]
  for path, value in tree.flatten(checkpoints.restore_item(reference["selected_checkpoint"])).items():
    np.testing.assert_array_equal(
        tree.flatten(checkpoints.restore_item(resumed["selected_checkpoint"]))[path], value,
        err_msg=path)

  def rows(d):
    out = [json.loads(l) for l in open(os.path.join(d, "pretrain", "metrics.jsonl"))]
    return [{k: v for k, v in r.items() if k != "steps_per_sec"} for r in out]
  assert rows(workdir) == rows(tmp_path / "reference")


def test_alignment_analysis_of_a_grap_checkpoint(tmp_path):
  """spt_jax.analysis.grap_alignment: the encoder-space cosine is the one of the gradients taken
  straight through the encoder, every cosine is finite and in [-1, 1], and a non-GraP phase is
  refused with the key named."""
  from spt_jax.analysis import grap_alignment
  from spt_jax.objectives.composite import HEADS, PROBE
  from spt_jax.data import pipeline, tasks
  config = load_config("synthetic_grap", "smoke")
  config.phases = "pretrain"
  config.data.synthetic.update(length=16, num_train=64, num_val=16, num_test=16)
  config.data.max_length = 16
  config.model.update(d_model=16, num_heads=2, d_ff=32)
  config.pretrain.update(num_steps=10, batch_size=16, eval_every_steps=10,
                         checkpoint_every_steps=10, log_every_steps=5)
  experiment.run(config, str(tmp_path))
  result = grap_alignment.analyse(str(tmp_path / "pretrain"), "latest", num_batches=3)
  losses = ["mlm", "span", "contrastive", "random"]
  assert result["losses"] == losses and set(result["spaces"]) == {"z", "encoder", "attention_qk"}
  for per_loss in result["spaces"].values():
    for name in losses:
      values = np.asarray(per_loss[name]["per_batch"])
      assert values.shape == (3,) and np.all(np.abs(values) <= 1 + 1e-6), (name, values)
      assert np.isfinite(per_loss[name]["se"])
  assert 0 <= result["probe_accuracy"] <= 1 and result["labelled_examples"] == 48
  assert "| z |" in grap_alignment.table(result)

  # One batch by hand: grad of (loss ∘ encoder) w.r.t. the encoder, for mlm and for the probe.
  task = tasks.load(config.data)
  comp = train.make_objective(config, "pretrain", task)
  splits = comp.splits(task)
  batch = next(pipeline.train_batches(splits["train"], 16, seed=3, start_step=0))
  params = checkpoints.restore_item(str(tmp_path / "pretrain/checkpoints/latest/10/params"))
  rng = jax.random.PRNGKey(7)
  cosines, _ = grap_alignment.make_batch_statistics(comp)(params, batch, rng)
  b = dict(batch, inputs=jnp.asarray(batch["inputs"], jnp.int32))
  views = comp.views(rng, b)

  def through_encoder(name):
    def fn(encoder):
      z, mask = comp.encode(encoder, views["view1"], train=False, rng=rng)
      z2 = comp.encode(encoder, views["view2"], train=False, rng=rng)[0]
      return comp.head_loss(name, z, mask, params[HEADS], views, b,
                            z2=jax.lax.stop_gradient(z2))[0]
    return np.concatenate([np.ravel(v) for _, v in sorted(tree.flatten(
        jax.grad(fn)(params["encoder"])).items())])
  direct = _cos(through_encoder("mlm"), through_encoder(PROBE))
  np.testing.assert_allclose(float(cosines["encoder"][0]), direct, rtol=1e-4, atol=1e-6)

  config.pretrain.composite.weighting = "uniform"
  with pytest.raises(ValueError, match="composite.weighting='uniform'"):
    grap_alignment.measure(config, "pretrain", params, num_batches=1)
