"""Pretraining → fine-tuning theory in diagonal linear networks (Anguita et al., 2026).

`diagonal`: the model, its initialisations, the teacher-student data and full-batch GD.
`implicit_bias`: the potential that fine-tuning minimises, its constrained minimiser, ℓ-order and PD.
`experiments`: the generalisation-error sweeps (`python -m spt_jax.theory.experiments`).
"""
