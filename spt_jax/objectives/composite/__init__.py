"""Composite self-pretraining: several pretraining heads on one shared encoder output z.

The package: losses.py (the losses, one class each, looked up by name), heads.py (their heads and
GraP's probe), objective.py (the objective: views, encoding, the weighted step), report.py (the
'weights' rows and the GraP verdict); spt_jax/grap.py holds the weightings.

Losses (`composite.losses`, any non-empty subset, each a head under `pretrain_heads/<name>`):
  mlm          masked-token cross-entropy on i.i.d. masked positions (rate `mask_rate`)
  span         cross-entropy on contiguous masked spans (geometric lengths of mean `span_length`,
               covering about `span_rate` of the tokens)
  contrastive  InfoNCE between the mean-pooled, projected embeddings of two independently masked views
               of each sequence (temperature `temperature`; in-batch negatives)
  random       a deliberately useless loss: per-position class labels drawn from a fixed seed per
               training example index and position, independent of the tokens (pure memorisation)
  time         L1 regression of each real position's time delta, for tasks with a `time_deltas`
               field (markov_events: every delta is 1, so a bias learns it; near-useless)
GraP adds a downstream probe (`grap.probe`): a linear classifier on the pooled z ('pooled_linear') or
an MLP (hidden `grap.probe_hidden`, ReLU) on every token, whose logits averaged over the tokens classify
the sequence ('token_mlp', pretpp's downstream head without its batch norm). It is trained on the
labelled examples only, on its own loss, and supplies the downstream gradient; it never reaches the
encoder. With `grap.probe_optimizer='own'` (default) its parameters and its own Adam (`grap.probe_lr`,
constant, no warmup) are in the objective's state; with 'shared' it is the parameter
`pretrain_heads/grap_probe` under the phase's AdamW and schedule (the earlier design, and the mode
spt_jax.analysis.grap_alignment reads). Alignment in z needs the downstream gradient on the same z, so
the labelled examples are those of the current batch whose index lies in the first
`grap.label_fraction` of the training set (labels of the others are never read; a batch without any
leaves GraP's statistics, logits and probe unchanged).

How the objectives share the forward pass: ONE corrupted input (view 1) serves every head. Its mask
is the union of the mlm mask and the span mask; the mlm head is scored on the mlm positions, the span
head on the span positions, the random and time heads on every real position, the probe on the pooled
z or its tokens. The contrastive loss needs a second view: view 2 is drawn from the same corruption
distribution, independently, and encoded in a second forward pass whose output is treated as a
constant (stop gradient). So all gradients live on view 1's z [B, L, D], the space GraP aligns in, and
the encoder still gets a single backward pass. The two views are exchangeable, so the gradient
through view 2 has the same expectation as the one through view 1: dropping it halves the expected
contrastive gradient, a scale that the weighting methods normalise away.

A step (`Composite.train_grads`; spt_jax/grap.py for the weighting):
  z = encoder(view 1) with its VJP kept; z2 = encoder(view 2), a constant (contrastive only)
  for each loss i, on the detached z: L_i, dL_i/dz and head i's parameter gradient
  GraP only: the probe's loss on the labelled examples, dL_down/dz and the probe's gradient
  weighting → z-gradient (and the coefficients λ_i it applies to the raw losses, for the logs)
  ONE backward through the encoder with the z-gradient; every head gets its own UNWEIGHTED gradient
  (as the reference: a loss whose weight falls to ~0 keeps training its head, so its gradient stays
  informative and its weight can recover); the probe takes its own step ('own') or its gradient goes
  to the trainer ('shared'); the trainer's AdamW on the parameters, the weighting's state (with an
  'own' probe) updated alongside (the objective's state, in the optimiser state under 'weighting').

The head parameters are all under `pretrain_heads/`, so a fine-tuning phase loads the encoder with
`init_from.exclude=("pretrain_heads/.*",)`. Beyond the common files a composite phase writes
metrics.jsonl rows of split 'weights' every `composite.log_weights_every` steps (one column per loss,
plus `align_<loss>`, `logit_<loss>`, `coef_<loss>`, `grad_norm_<loss>`, ... for GraP) and
`<phase>/weights.png` with their trajectories (drawn by the caller's `weights_figure` hook). A GraP
phase ends by measuring the probe's validation accuracy (the final encoder and probe, on the
validation split) and writes `grap` into results.json: that accuracy, chance (the majority class),
each loss's normalised weight as the median over the last quarter of the 'weights' rows relative to
the largest, and a verdict, or "GraP not applicable (probe reads nothing)" when the probe is below
chance + 15 points (`PRECONDITION_MARGIN`): its gradient then carries no label signal, and the
weights say nothing about the losses' usefulness. Validation selects the best checkpoint on the first
loss's accuracy in ALL_LOSSES order (the mlm head's masked-token accuracy when mlm is among the losses).
"""
from spt_jax.objectives.composite.heads import PretrainHeads, Probe
from spt_jax.objectives.composite.losses import (ALL_LOSSES, TABLE, TOKEN_LOSSES, USELESS,
                                                 Projection, random_targets)
from spt_jax.objectives.composite.objective import (HEADS, LOSSES, PROBE, PROBE_OPTIMIZERS, PROBES,
                                                    Composite, prepare_splits, validate_phase,
                                                    weighting_from_config)
from spt_jax.objectives.composite.report import (NOT_APPLICABLE, PRECONDITION_MARGIN,
                                                 WeightsReporter, grap_report, read_weight_rows,
                                                 weight_row)
from spt_jax.masking import span_mask

__all__ = ["ALL_LOSSES", "HEADS", "LOSSES", "NOT_APPLICABLE", "PRECONDITION_MARGIN", "PROBE",
           "PROBES", "PROBE_OPTIMIZERS", "TABLE", "TOKEN_LOSSES", "USELESS", "Composite",
           "PretrainHeads", "Probe", "Projection", "WeightsReporter", "grap_report",
           "prepare_splits", "random_targets", "read_weight_rows", "span_mask", "validate_phase",
           "weight_row", "weighting_from_config"]
