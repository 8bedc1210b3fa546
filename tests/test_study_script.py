"""scripts/lra_plateau_study.sh's order of work, with `python` replaced by a stub that records each
command: breadth first, a task's stages of one pass in one queue before their tables, records saved
after every sweep, the init-scale sweeps on the plateau study's Pathfinder workdir."""
import os
import stat
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_plateau_study_script_runs_the_passes_in_order(tmp_path):
  log = tmp_path / "calls"
  stub = tmp_path / "bin" / "python"
  stub.parent.mkdir()
  stub.write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
  stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
  workdir = tmp_path / "wd"
  subprocess.run(["bash", os.path.join(ROOT, "scripts", "lra_plateau_study.sh"), str(workdir)],
                 check=True, env={**os.environ, "PATH": f"{stub.parent}:{os.environ['PATH']}"})
  calls = log.read_text().splitlines()
  sweeps = [c.split("--config=configs/sweeps/")[1].split()[0] for c in calls if "spt_jax.sweep" in c]
  assert sweeps == [
      "lra_plateau.py:pathfinder,a+b", "lra_plateau.py:pathfinder,a", "lra_plateau.py:pathfinder,b",
      "lra_plateau.py:listops,a+b", "lra_plateau.py:listops,a", "lra_plateau.py:listops,b",
      "lra_plateau.py:pathfinder,d+lr", "lra_plateau.py:pathfinder,d", "lra_plateau.py:pathfinder,lr",
      "lra_plateau.py:pathfinder,a+b", "lra_plateau.py:pathfinder,a", "lra_plateau.py:pathfinder,b",
      "lra_plateau.py:pathfinder,d",
      "init_scales.py:pathfinder", "init_scales.py:pathfinder,data",
      "lra_plateau.py:pathfinder,c", "lra_plateau.py:listops,c", "lra_plateau.py:pathfinder,c",
      "lra_plateau.py:pathfinder,e", "lra_plateau.py:listops,e"]
  sweep_calls = [c for c in calls if "spt_jax.sweep" in c]
  # Stages a and b at seeds 0-2, then Pathfinder's d and lr at seeds 0-2; then a, b and d at every
  # seed of the config (Pathfinder's 3-4), then the init-scale study, before stage c at any seed;
  # c at seeds 0-2 before its seeds 3-4; stage e at seeds 0-2.
  first_seeds = [c for c in sweep_calls if "--config.seeds=(0,1,2)" in c]
  every_seed = [c for c in sweep_calls if "--config.seeds" not in c and "lra_plateau" in c]
  assert len(first_seeds) == 6 + 3 + 2 + 2 and len(every_seed) == 4 + 1
  assert sweep_calls.index(every_seed[0]) == 9 and sweep_calls.index(every_seed[4]) == 17
  assert [i for i, c in enumerate(sweep_calls) if "init_scales" in c] == [13, 14]
  assert not any("--config.seeds" in c for c in sweep_calls if "init_scales" in c)
  assert all(f"--workdir={workdir}/pathfinder" in c for c in sweep_calls if "init_scales" in c)
  # The study's runs keep the one XLA thread per core they started with.
  assert all("--run_threads=slot" in c for c in sweep_calls)
  # Every sweep is followed by its task's attention rows (measured while the checkpoints exist),
  # an init-scale sweep by its report's rows too, then by saving the finished runs as records.
  for i, c in enumerate(calls):
    if "spt_jax.sweep" in c:
      task = c.split("--workdir=")[1].split()[0].rsplit("/", 1)[1]
      assert "lra_plateau_attention.py" in calls[i + 1] and f"--task={task}" in calls[i + 1]
      config = c.split("--config=")[1].split()[0]
      if "init_scales" in config:
        assert calls[i + 2].startswith("scripts/init_scales_report.py") and (
            f"--sweep={config} " in calls[i + 2]), calls[i + 2]
        i += 1
      assert "run_records.py save" in calls[i + 2], calls[i + 2]
  assert [c.split("--out=")[1] for c in calls if "init_scales_report" in c] == [
      f"{workdir}/pathfinder/init_scales_report/pathfinder",
      f"{workdir}/pathfinder/init_scales_report/pathfinder_data"]
