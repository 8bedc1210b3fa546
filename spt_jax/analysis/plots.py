"""PNG figures for the analyses (matplotlib with the non-interactive Agg backend)."""
from __future__ import annotations

import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def heatmaps(maps: np.ndarray, path: str, title: str, *, labels=None, symmetric=False,
             xlabel: str = "key position", ylabel: str = "query position", extent=None) -> None:
  """A row of heatmaps, one per leading index of `maps` [N, a, b] (NaN cells blank); `extent` as
  matplotlib's imshow takes it, for axes in other units than indices."""
  n = maps.shape[0]
  fig, axes = plt.subplots(1, n, figsize=(3.2 * n, 3.2), squeeze=False)
  for idx, ax in enumerate(axes[0]):
    m = maps[idx]
    if symmetric:
      lim = np.nanmax(np.abs(m)) or 1.0
      im = ax.imshow(m, cmap="RdBu_r", vmin=-lim, vmax=lim, extent=extent)
    else:
      im = ax.imshow(m, cmap="viridis", extent=extent)
    ax.set_title(labels[idx] if labels else f"head {idx}", fontsize=9)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    fig.colorbar(im, ax=ax, fraction=0.046)
  fig.suptitle(title, fontsize=10)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def lines(xs, series: dict[str, tuple[np.ndarray, np.ndarray]], path: str, *, xlabel: str,
          ylabel: str, title: str, logx: bool = False) -> None:
  """Mean curves with ± std bands: series = {label: (means, stds)}."""
  fig, ax = plt.subplots(figsize=(5.5, 3.8))
  for label, (mean, std) in series.items():
    ax.plot(xs, mean, marker="o", label=label)
    ax.fill_between(xs, np.asarray(mean) - std, np.asarray(mean) + std, alpha=0.2)
  if logx:
    # The linear part ends at the smallest positive x, so that a 0 (e.g. no pretraining) sits one
    # decade's width left of it instead of several, and the positive xs keep their log spacing.
    positive = [x for x in xs if x > 0]
    ax.set_xscale("symlog", linthresh=min(positive) if positive else 1)
  ax.set_xticks(list(xs))
  ax.set_xticklabels([f"{x:g}" for x in xs])
  _finish_curves(fig, ax, path, xlabel, ylabel, title)


def _set_title(fig, ax, title: str) -> None:
  """The title at fontsize 10, wrapped to the figure's width (a sweep's titles are long)."""
  chars_per_line = max(20, int(fig.get_figwidth() * 11))
  ax.set_title(textwrap.fill(title, chars_per_line), fontsize=10)


def _finish_curves(fig, ax, path: str, xlabel: str, ylabel: str, title: str) -> None:
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel)
  _set_title(fig, ax, title)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def bars(names, means, stds, path: str, *, ylabel: str, title: str) -> None:
  fig, ax = plt.subplots(figsize=(max(4.0, 0.9 * len(names) + 1.5), 3.8))
  ax.bar(range(len(names)), means, yerr=stds, capsize=4, color="tab:blue", alpha=0.8)
  ax.set_xticks(range(len(names)))
  ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
  ax.set_ylabel(ylabel)
  _set_title(fig, ax, title)
  ax.grid(axis="y", alpha=0.3)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def weights(rows, losses, path: str, title: str) -> None:
  """Each loss's weight against the step, from a composite phase's 'weights' rows of metrics.jsonl
  (for `train.AnalysisHooks.weights_figure`)."""
  steps = [r["step"] for r in rows]
  fig, ax = plt.subplots(figsize=(6.0, 3.8))
  for name in losses:
    ax.plot(steps, [r[name] for r in rows], label=name)
  _finish_curves(fig, ax, path, "step", "loss weight", title)


def weight_grid(arms: dict, path: str, title: str) -> None:
  """One panel per arm: every seed's weight of every loss against the step (colour = loss).
  arms = {arm: {seed: (steps, {loss: weights})}}."""
  colours = {}
  n = len(arms)
  cols = min(n, 2)
  rows = -(-n // cols)
  fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.4 * rows), squeeze=False,
                           sharey=True)
  for ax, (arm, seeds) in zip(axes.flat, arms.items()):
    for steps, weights in seeds.values():
      for loss, values in weights.items():
        colour = colours.setdefault(loss, f"C{len(colours)}")
        ax.plot(steps, values, color=colour, alpha=0.7, linewidth=1.0)
    ax.set_title(f"{arm} ({len(seeds)} seeds)", fontsize=9)
    ax.set_xlabel("step", fontsize=8)
    ax.set_ylabel("normalised weight", fontsize=8)
    ax.grid(alpha=0.3)
  for ax in list(axes.flat)[n:]:
    ax.set_visible(False)
  handles = [matplotlib.lines.Line2D([], [], color=c, label=loss) for loss, c in colours.items()]
  fig.legend(handles=handles, loc="upper right", fontsize=8, ncol=len(handles))
  fig.suptitle(title, fontsize=10, x=0.02, ha="left")
  fig.tight_layout(rect=(0, 0, 1, 0.95))
  fig.savefig(path, dpi=110)
  plt.close(fig)
