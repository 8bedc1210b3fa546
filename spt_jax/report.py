"""`python -m spt_jax.report WORKDIR`: a run's learning-curve PNGs and markdown summaries, drawn from
its metrics.jsonl files alone (spt_jax/analysis/report.py)."""
from __future__ import annotations

import sys

from spt_jax.analysis.report import main

if __name__ == "__main__":
  sys.exit(main())
