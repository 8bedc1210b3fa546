import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

from spt_jax import checkpoints, config_lib, sweep, tree

TINY = ("pretrain.num_steps=4 finetune.num_steps=4 pretrain.eval_every_steps=2 "
        "finetune.eval_every_steps=2 data.synthetic.num_train=64 data.synthetic.num_val=16 "
        "data.synthetic.num_test=16 pretrain.batch_size=8 finetune.batch_size=8")


def _sweep():
  return config_lib.sweep_config(
      base="configs/synthetic_spt.py:smoke", seeds=(0,), title="tiny",
      # Listed before the run it starts from: the sweep runs that one first.
      runs=[f"from_spt: {TINY} phases=finetune "
            "finetune.init_from.source={workdir}/spt/seed_{seed}/pretrain", f"spt: {TINY}"],
      steps_to=0.5)


def test_sweep_writes_table_and_plot_and_skips_finished_runs(tmp_path):
  rows = sweep.run_sweep(_sweep(), str(tmp_path))
  assert [r["run"] for r in rows] == ["from_spt", "spt"]
  spec = sweep.json.load(open(tmp_path / "from_spt/seed_0/run_spec.json"))
  assert spec["overrides"]["finetune.init_from.source"] == f"{tmp_path}/spt/seed_0/pretrain"
  loaded = sweep.json.load(open(tmp_path / "from_spt/seed_0/finetune/init_from.json"))
  assert loaded["loaded"] and str(tmp_path / "spt/seed_0/pretrain") in loaded["source"]
  for name in ("table.md", "table.csv", "plot.png", "results.json"):
    assert os.path.getsize(tmp_path / name) > 0
  table = open(tmp_path / "table.md").read()
  assert "| spt |" in table and "finetune.test_of_best.accuracy" in table
  assert not os.path.exists(tmp_path / "from_spt/seed_0/pretrain")
  stamps = {d: os.path.getmtime(tmp_path / d / "seed_0/results.json") for d in ("spt", "from_spt")}
  assert sweep.run_sweep(_sweep(), str(tmp_path)) == rows
  assert stamps == {d: os.path.getmtime(tmp_path / d / "seed_0/results.json") for d in stamps}
  _records_survive_the_workdir(tmp_path, rows)
  _init_scales_report(tmp_path)


def _load_script(name):
  spec = importlib.util.spec_from_file_location(name, os.path.join(sweep.ROOT, "scripts",
                                                                   f"{name}.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _init_scales_report(workdir):
  """scripts/init_scales_report.py over the tiny sweep: an arm loading the same checkpoint with
  the same hand-off as `spt` has the same loaded attention and representation; ENSD with the
  pretrained representation is bounded by the two PRs' geometric mean."""
  out = workdir.parent / "init_scales"
  rows = {r["arm"]: r for r in _load_script("init_scales_report").report(
      _sweep(), str(workdir), str(out), "tiny")}
  assert set(rows) == {"spt", "from_spt"}
  for key in ("band_mass", "mean_distance", "pr_loaded"):
    assert rows["spt"][key][0] == pytest.approx(rows["from_spt"][key][0], rel=1e-5), key
  assert 0 < rows["spt"]["band_mass"][0] < 1 and rows["spt"]["pr_loaded"][0] >= 1
  spt = {k: v[0] for k, v in rows["spt"].items() if isinstance(v, tuple)}
  assert 0 < spt["ensd"] <= (spt["pr_loaded"] * spt["pr_tuned"]) ** 0.5 + 1e-6  # Cauchy-Schwarz
  assert "| from_spt | 1 |" in (out / "table.md").read_text()
  assert (out / "summary.png").stat().st_size > 0
  assert set(sweep.json.load(open(out / "runs.json"))) == {"runs", "pr_fell", "spearman"}
  # --handoff: the arms' hand-offs made from spt's, before any of their runs exists. Its spt row
  # is the finished run's; a γ arm (readout only) is left out, a rescaled arm is in.
  unrun = config_lib.sweep_config(
      base="configs/synthetic_spt.py:smoke", seeds=(0,), title="tiny", runs=[
          f"spt: {TINY}",
          "gamma: phases=finetune finetune.init_from.gamma_ft=0.1",
          "half: phases=finetune finetune.init_from.rescale=0.5 "
          "finetune.init_from.rescale_paths=encoder finetune.init_from.relative_scale=0.5"])
  handoff = {r["arm"]: r for r in _load_script("init_scales_report").handoff(
      unrun, str(workdir), str(out), "tiny")}
  assert set(handoff) == {"spt", "half"}
  for key in ("band_mass", "mean_distance", "pr_loaded"):
    assert handoff["spt"][key][0] == pytest.approx(rows["spt"][key][0], rel=1e-6), key
  assert handoff["half"]["pr_loaded"][0] != pytest.approx(handoff["spt"]["pr_loaded"][0])
  # Per layer, against spt's own logits: spt is the reference (slope and correlation 1); the
  # encoder halved (attention × √1.5 on top) cools layer 0's softmax: slope ≈ 0.5⁴ · 1.5.
  assert handoff["spt"]["logit_slope"][0][0] == pytest.approx(1.0, rel=1e-5)
  assert handoff["spt"]["logit_correlation"][0][0] == pytest.approx(1.0, rel=1e-5)
  assert 0.02 < handoff["half"]["logit_slope"][0][0] < 0.2
  assert handoff["half"]["entropy"][0][0] > handoff["spt"]["entropy"][0][0]
  assert [s["seed"] for s in handoff["half"]["per_seed"]] == [0]
  assert "| half | 1 |" in (out / "handoff.md").read_text()
  assert _load_script("init_scales_report").unscaled_arms(unrun) == ["spt", "gamma"]
  _init_scales_rows_outlive_checkpoints(workdir, rows)


def _init_scales_rows_outlive_checkpoints(workdir, rows):
  """Each run's measured row is kept beside it (and in its records): once its checkpoints are
  gone the report reads it from there; a run with neither shows its accuracy and '—'. ENSD's
  reference falls back to `spt_repeat`'s hand-off where `spt`'s is gone."""
  script = _load_script("init_scales_report")
  kept_row = workdir / "from_spt/seed_0/finetune" / script.ROW_FILE
  assert sweep.json.load(open(kept_row))["ensd_reference"] == "spt"
  records = workdir.parent / "records_rows"
  _load_script("run_records").save(workdir, records)
  saved = records / "from_spt/seed_0/finetune" / script.ROW_FILE
  assert saved.read_text() == kept_row.read_text()
  shutil.copytree(workdir / "from_spt", workdir / "spt_repeat")  # the same hand-off, run again
  for arm in ("spt", "from_spt"):
    shutil.rmtree(workdir / arm / "seed_0/finetune/checkpoints")
  (workdir / "spt/seed_0/finetune" / script.ROW_FILE).unlink()
  with_repeat = config_lib.sweep_config(
      base="configs/synthetic_spt.py:smoke", seeds=(0,), title="tiny",
      runs=[*_sweep().runs, f"spt_repeat: {_sweep().runs[0].split(':', 1)[1]}"], steps_to=0.5)
  again = {r["arm"]: r for r in script.report(with_repeat, str(workdir),
                                              str(workdir.parent / "again"), "tiny")}
  assert again["spt"]["test_accuracy"] == rows["spt"]["test_accuracy"]
  assert again["spt"]["pr_tuned"] is None and again["spt"]["ensd_reference"] == []
  for key in script.COLUMNS:  # from the kept row
    assert again["from_spt"][key][:2] == pytest.approx(rows["from_spt"][key][:2]), key
  repeat = again["spt_repeat"]
  assert repeat["ensd_reference"] == ["spt_repeat"]
  assert repeat["pr_loaded"][0] == pytest.approx(rows["spt"]["pr_loaded"][0], rel=1e-5)
  table = (workdir.parent / "again/table.md").read_text()
  assert "| spt | 1 |" in table and table.split("| spt | 1 |")[1].split("\n")[0].endswith("— |")
  # With no unscaled arm's hand-off left, a rescaled arm's ENSD takes the SPT checkpoint it
  # loaded, read without the rescale: the reference spt_repeat's hand-off gave.
  shutil.copytree(workdir / "spt_repeat", workdir / "unit_rescale")
  (workdir / "unit_rescale/seed_0/finetune" / script.ROW_FILE).unlink()
  shutil.rmtree(workdir / "spt_repeat/seed_0/finetune/checkpoints")
  rescaled = config_lib.sweep_config(
      base="configs/synthetic_spt.py:smoke", seeds=(0,), title="tiny", steps_to=0.5,
      runs=[*with_repeat.runs, f"unit_rescale: {_sweep().runs[0].split(':', 1)[1]} "
            "finetune.init_from.rescale=1.0 finetune.init_from.rescale_paths=encoder"])
  assert script.rescaled_arms(rescaled) == ["unit_rescale"]
  last = {r["arm"]: r for r in script.report(rescaled, str(workdir), str(workdir.parent / "last"),
                                             "tiny")}
  assert last["unit_rescale"]["ensd_reference"] == [script.SOURCE_REFERENCE]
  assert last["unit_rescale"]["ensd"][0] == pytest.approx(repeat["ensd"][0], rel=1e-5)


def _records_survive_the_workdir(workdir, rows):
  """scripts/run_records.py: a lost workdir's finished runs come back from their records, the
  sweep skips them and its table is the same; a run stopped between phases is not recorded."""
  records = _load_script("run_records")
  partial = workdir / "half" / "seed_0"  # pretrained, not fine-tuned
  partial.mkdir(parents=True)
  (partial / "run_spec.json").write_text(sweep.json.dumps(
      {"overrides": {"config": "configs/synthetic_spt.py:smoke"}, "seed": 0}))
  (partial / "results.json").write_text('{"pretrain": {}}')
  kept = workdir.parent / "records"
  assert records.save(workdir, kept) == 2
  assert not (kept / "half").exists() and (kept / "spt/seed_0/pretrain/metrics.jsonl").exists()
  # Of checkpoints only the pretraining's hand-off, its newest `best` one.
  assert {p.relative_to(kept).parts[:5] for p in kept.rglob("*")
          if p.is_file() and "checkpoints" in p.parts} == {
      ("spt", "seed_0", "pretrain", "checkpoints", "best")}
  fresh = workdir.parent / "fresh"
  assert records.restore(kept, fresh) == (2, 0)
  assert sweep.run_sweep(_sweep(), str(fresh)) == rows
  assert not (fresh / "spt/seed_0/pretrain/checkpoints/latest").exists()  # nothing was re-run
  assert records.restore(kept, fresh) == (0, 2)
  handoff = {str(workdir): workdir, str(fresh): fresh}  # runs can start from a restored hand-off
  loaded = {k: checkpoints.restore_item(checkpoints.resolve_params_dir(
      os.fspath(v / "spt/seed_0/pretrain"), "best")) for k, v in handoff.items()}
  a, b = (tree.flatten(x) for x in loaded.values())
  assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)


def test_bad_run_specs_are_refused():
  with pytest.raises(ValueError, match="must look like 'name: key=value"):
    sweep.parse_run("no colon here")
  with pytest.raises(ValueError, match="is not key=value"):
    sweep.parse_run("x: model.num_layers")
  config = sweep.load_config("configs/synthetic_spt.py")
  with pytest.raises(KeyError, match="no field 'model.num_layerz'"):
    sweep.apply_overrides(config, {"model.num_layerz": 2})
  assert sweep.parse_run("a: b.c=2 d=x e=") == ("a", {"b.c": 2, "d": "x", "e": ""})


def _sweep_file(tmp_path, fields: str) -> str:
  path = tmp_path / "my_sweep.py"
  path.write_text("import ml_collections\n\n\ndef get_config(arg=None):\n"
                  f"  return ml_collections.ConfigDict(dict({fields}))\n")
  return str(path)


@pytest.mark.parametrize("fields, problem", [
    ("base='b.py', seeds=(0,), metrics=('m',), title='t'", "missing required field(s) 'runs'"),
    ("runs=('a:',), seeds=(0,), metrics=('m',)", "missing required field(s) 'base', 'title'"),
    ("base='b.py', runs=('a:',), seeds=(0,), metrics=(), title='t'",
     "'metrics' must be a non-empty list of str, got ()"),
    ("base='b.py', runs='a: x=1', seeds=(0,), metrics=('m',), title='t'",
     "'runs' must be a non-empty list of str, got 'a: x=1'"),
    ("base='b.py', run=('a:',), seeds=(0,), metrics=('m',), title='t'",
     "missing required field(s) 'runs'; unknown field(s) 'run'"),
])
def test_incomplete_sweep_config_is_one_line_naming_field_and_file(tmp_path, fields, problem):
  path = _sweep_file(tmp_path, fields)
  with pytest.raises(ValueError) as error:
    sweep.run_sweep(sweep.load_config(path), str(tmp_path / "w"), source=path)
  assert str(error.value) == f"{path}: {problem} (fields: see spt_jax/sweep.py)."
  with pytest.raises(ValueError, match=r"^the sweep config: "):
    sweep.run_sweep(sweep.load_config(path), str(tmp_path / "w"))
  assert not (tmp_path / "w").exists()


def test_sweep_cli_without_runs_names_the_field_and_the_file(tmp_path):
  path = _sweep_file(tmp_path, "base='b.py', seeds=(0,), metrics=('m',), title='t'")
  done = subprocess.run([sys.executable, "-m", "spt_jax.sweep", f"--config={path}",
                         f"--workdir={tmp_path / 'w'}"], capture_output=True, text=True,
                        timeout=120, cwd=sweep.ROOT)
  assert done.returncode != 0
  assert done.stderr.strip().splitlines()[-1] == (
      f"ValueError: {path}: missing required field(s) 'runs' (fields: see spt_jax/sweep.py).")
  assert not (tmp_path / "w").exists()


def test_parallel_runs_start_only_after_the_runs_they_reference(tmp_path, monkeypatch):
  events = []

  def fake_run(overrides, seed, run_dir, cores=None, threads=0):
    name = os.path.basename(os.path.dirname(run_dir))
    events.append(("start", name, seed))
    if name == "broken":
      raise RuntimeError(f"{run_dir} failed")
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "results.json"), "w") as f:
      sweep.json.dump({"pretrain": {}, "finetune": {"steps": 1}}, f)
    events.append(("end", name, seed))

  monkeypatch.setattr(sweep, "_run_subprocess", fake_run)
  ref = "phases=finetune finetune.init_from.source={workdir}/%s/seed_{seed}/pretrain"
  sweep_cfg = config_lib.sweep_config(
      base="configs/synthetic_spt.py:smoke", seeds=(0, 1), title="t", metrics=("finetune.steps",),
      runs=[f"child: {ref % 'parent'}", "parent:", "broken:", f"orphan: {ref % 'broken'}"])
  # A run killed after its first phase left a results.json without its last: not finished.
  os.makedirs(tmp_path / "parent/seed_0")
  (tmp_path / "parent/seed_0/results.json").write_text('{"pretrain": {}}')
  with pytest.raises(RuntimeError) as error:
    sweep.run_sweep(sweep_cfg, str(tmp_path), processes=2)
  for seed in (0, 1):
    assert events.index(("end", "parent", seed)) < events.index(("start", "child", seed))
    assert events.count(("start", "parent", seed)) == 1
    assert ("start", "orphan", seed) not in events
  assert str(error.value).count("not run, it starts from a run that failed") == 2
  assert str(error.value).count("failed") >= 4
  sweep_cfg.update(runs=("parent:", f"child: {ref % 'parent'}"), output="tables")
  rows = sweep.run_sweep(sweep_cfg, str(tmp_path), processes=2)  # Both finished: nothing re-run.
  assert [r["run"] for r in rows] == ["parent", "child"]
  assert os.path.exists(tmp_path / "tables" / "table.md")


def test_a_run_may_start_from_an_unlisted_run_once_it_has_finished(tmp_path, monkeypatch):
  """A study's stage swept on its own after the stages' shared queue ran (its table): the runs it
  starts from belong to another stage and have finished; one that has not is refused by seed."""
  def fake_run(overrides, seed, run_dir, cores=None, threads=0):
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "results.json"), "w") as f:
      sweep.json.dump({"pretrain": {}, "finetune": {"steps": 1}}, f)

  monkeypatch.setattr(sweep, "_run_subprocess", fake_run)
  child = "child: phases=finetune finetune.init_from.source={workdir}/parent/seed_{seed}/pretrain"
  cfg = lambda runs, seeds, output: config_lib.sweep_config(
      base="configs/synthetic_spt.py:smoke", seeds=seeds, title="t", metrics=("finetune.steps",),
      runs=runs, output=output)
  sweep.run_sweep(cfg(["parent:", child], (0, 1), "both"), str(tmp_path), processes=2)
  rows = sweep.run_sweep(cfg([child], (0, 1), "child"), str(tmp_path))
  assert [r["run"] for r in rows] == ["child"]
  assert os.path.exists(tmp_path / "child" / "table.md")
  with pytest.raises(ValueError, match=r"run 'child' starts from run 'parent', which the sweep "
                                       r"does not list and which has not finished in .* at "
                                       r"seed\(s\) \[2\]; add it to runs"):
    sweep.run_sweep(cfg([child], (0, 1, 2), "wider"), str(tmp_path))
  assert not (tmp_path / "child" / "seed_2").exists()


def test_run_seeds_run_an_arm_at_some_seeds_only(tmp_path, monkeypatch):
  """A re-run of the seeds a stopping rule cut short: that arm at those seeds only, in the table
  with as many seeds; a name or seed the sweep does not have is refused before anything runs."""
  started = []

  def fake_run(overrides, seed, run_dir, cores=None, threads=0):
    started.append((os.path.basename(os.path.dirname(run_dir)), seed))
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "results.json"), "w") as f:
      sweep.json.dump({"pretrain": {}, "finetune": {"steps": seed + 1}}, f)

  monkeypatch.setattr(sweep, "_run_subprocess", fake_run)
  child = "child: phases=finetune finetune.init_from.source={workdir}/parent/seed_{seed}/pretrain"
  cfg = lambda run_seeds, runs=("parent:", "rerun:"): config_lib.sweep_config(
      base="configs/synthetic_spt.py:smoke", seeds=(0, 1, 2), title="t",
      metrics=("finetune.steps",), runs=runs, run_seeds=run_seeds)
  rows = {r["run"]: r for r in sweep.run_sweep(cfg({"rerun": (2,)}), str(tmp_path), processes=2)}
  assert sorted(started) == [("parent", 0), ("parent", 1), ("parent", 2), ("rerun", 2)]
  assert (rows["rerun"]["seeds"], rows["rerun"]["finetune.steps_mean"]) == (1, 3.0)
  assert (rows["parent"]["seeds"], rows["parent"]["finetune.steps_mean"]) == (3, 2.0)
  assert "(rerun at seeds [2] only)" in (tmp_path / "table.md").read_text()
  narrowed = cfg({"rerun": (2,)})  # as --config.seeds='(0,1)' narrows it: rerun has no seed left
  narrowed.seeds = (0, 1)
  assert [r["run"] for r in sweep.run_sweep(narrowed, str(tmp_path))] == ["parent"]
  assert len(started) == 4
  for run_seeds, problem in (({"typo": (2,)}, "'run_seeds' names run 'typo', which 'runs' does "
                                              "not list"),
                             ({"rerun": ("2",)}, r"'run_seeds' of 'rerun' must be a non-empty "
                                                 r"list of int, got \('2',\)")):
    with pytest.raises(ValueError, match=problem):
      sweep.run_sweep(cfg(run_seeds), str(tmp_path / "refused"))
  with pytest.raises(ValueError, match=r"^the sweep config: run 'child' starts from run 'parent', "
                                       r"which 'run_seeds' "
                                       r"leaves out at seed\(s\) \[0, 1\]"):
    sweep.run_sweep(cfg({"parent": (2,)}, runs=("parent:", child)), str(tmp_path / "refused"))
  assert not (tmp_path / "refused").exists()


def test_sweeps_sharing_a_workdir_refuse_a_run_name_with_another_spec(tmp_path):
  run_dir = tmp_path / "spt" / "seed_0"
  sweep.check_run_spec(str(run_dir), {"overrides": {"config": "a.py"}, "seed": 0})
  # The same spec again, with a pattern tuple (saved as a JSON list): the run's own, not a clash.
  tupled = tmp_path / "tupled" / "seed_0"
  for _ in range(2):
    sweep.check_run_spec(str(tupled), {"overrides": {"finetune.freeze": ("qk", "mlp")}, "seed": 0})
  other = config_lib.sweep_config(base="b.py", seeds=(0,), title="t", runs=["spt:"])
  with pytest.raises(ValueError, match="holds a run started as .*a.py.* give the run another name"):
    sweep.run_sweep(other, str(tmp_path))
  unlisted = config_lib.sweep_config(base="b.py", seeds=(0,), title="t",
                                     runs=["ft: x={workdir}/spt/seed_{seed}/pretrain"])
  with pytest.raises(ValueError, match="run 'ft' starts from run 'spt', which the sweep does not "
                                       "list"):
    sweep.run_sweep(unlisted, str(tmp_path / "other"))


def test_sweep_curves_read_only_validation_records_and_draw_every_run(tmp_path):
  for name, accs in (("a", ((0.1, 0.5), (0.3, 0.7))), ("b", ((0.2, 0.2),))):
    for seed, (first, second) in enumerate(accs):
      phase = tmp_path / name / f"seed_{seed}" / "finetune"
      phase.mkdir(parents=True)
      phase.joinpath("metrics.jsonl").write_text(
          '{"step": 10, "split": "train", "accuracy": 0.9}\n'
          f'{{"step": 10, "split": "val", "accuracy": {first}}}\n'
          f'{{"step": 20, "split": "val", "accuracy": {second}}}\n')
  script = os.path.join(sweep.ROOT, "scripts", "sweep_curves.py")
  out = tmp_path / "curves.png"
  done = subprocess.run([sys.executable, script, f"--workdir={tmp_path}", "--runs=a,b",
                         f"--out={out}"], capture_output=True, text=True, timeout=120)
  assert done.returncode == 0, done.stderr
  assert out.stat().st_size > 0
  spec = importlib.util.spec_from_file_location("sweep_curves", script)
  curves = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(curves)
  assert curves.val_curve(str(tmp_path / "a" / "seed_1"), "finetune", "accuracy") == {10: 0.3,
                                                                                      20: 0.7}


@pytest.mark.parametrize("run_threads, threads", [("all", 4), ("slot", 0)])
def test_concurrent_runs_are_placed_on_disjoint_cores(tmp_path, monkeypatch, run_threads, threads):
  """Each on cores of its own, by default with an unconfined run's XLA thread count (the 4 cores
  the sweep may use), so that its float32 rounding is an unconfined run's; with 'slot', with as
  many threads as its cores (main.py's default)."""
  import threading
  lock, running, seen = threading.Lock(), {}, []

  def fake_run(overrides, seed, run_dir, cores=None, threads=0):
    with lock:
      assert cores, "a concurrent run was started without cores of its own"
      assert threads == expected_threads, threads
      for other in running.values():
        assert not set(cores) & set(other), (cores, other)
      running[run_dir] = cores
      seen.append(cores)
    sweep.time.sleep(0.05)
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "results.json"), "w") as f:
      sweep.json.dump({"finetune": {"steps": 1}}, f)
    with lock:
      del running[run_dir]

  expected_threads = threads
  monkeypatch.setattr(sweep, "_run_subprocess", fake_run)
  monkeypatch.setattr(sweep.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
  monkeypatch.delenv("PJRT_NPROC", raising=False)
  sweep_cfg = config_lib.sweep_config(base="configs/synthetic_scratch.py:smoke", seeds=(0, 1, 2),
                                      title="t", metrics=("finetune.steps",), runs=["a:", "b:"])
  sweep.run_sweep(sweep_cfg, str(tmp_path), processes=2, run_threads=run_threads)
  assert sorted(set(seen)) == [(0, 1), (2, 3)] and len(seen) == 6


def test_core_slots_split_the_cores_evenly_and_cores_are_checked():
  from spt_jax import platform
  assert platform.core_slots(2, [0, 1]) == [(0,), (1,)]
  assert platform.core_slots(2, [0, 1, 2, 3, 4]) == [(0, 1), (2, 3)]  # one size: core 4 unused
  assert platform.core_slots(3, [4, 5]) == [(4,), (5,), (4,)]  # more runs than cores: shared
  allowed = sorted(os.sched_getaffinity(0))
  assert platform.parse_cores(f"{allowed[0]}") == (allowed[0],)
  assert platform.parse_cores(f"{allowed[0]}-{allowed[-1]}") == tuple(allowed)
  with pytest.raises(ValueError, match="not among the cores this process may use"):
    platform.parse_cores("4096")
  with pytest.raises(ValueError, match=r"'x' is not a core id"):
    platform.parse_cores("0,x")
  with pytest.raises(ValueError, match="names no core"):
    platform.parse_cores(",")


@pytest.mark.parametrize("arg", ["synthetic", "synthetic,data", "pathfinder", "pathfinder,data"])
def test_init_scale_sweeps_load_and_pathfinder_shares_the_plateau_studys_spt_runs(arg):
  sw = sweep.check_sweep(config_lib.load_config(f"configs/sweeps/init_scales.py:{arg}"))
  names = [sweep.parse_run(r)[0] for r in sw.runs]
  assert len(set(names)) == len(names) and names[0] == "spt"
  for name, overrides in map(sweep.parse_run, sw.runs[1:]):
    assert sweep.references(overrides) == {"spt"}, name
  if arg.startswith("pathfinder"):  # one run directory, so one spec
    plateau = config_lib.load_config("configs/sweeps/lra_plateau.py:pathfinder,a")
    assert sweep.parse_run(sw.runs[0]) == sweep.parse_run(plateau.runs[0])
    assert sw.base == plateau.base
  # An arm the plateau rule stopped at chance runs again to the cap, at those seeds only, right
  # after its arm and with the same knob.
  module = config_lib.load_module(os.path.join(sweep.ROOT, "configs/sweeps/init_scales.py"))
  arms = module.TO_CAP_SEEDS[arg] if "," not in arg else {}
  expected = {module.to_cap_name(a): tuple(s) for a, s in arms.items()}
  assert {k: tuple(v) for k, v in sw.run_seeds.items()} == expected
  for arm, to_cap in ((a, module.to_cap_name(a)) for a in arms):
    assert names.index(to_cap) == names.index(arm) + 1
    capped, ruled = (dict(sweep.parse_run(sw.runs[names.index(n)])[1]) for n in (to_cap, arm))
    assert capped.pop("finetune.stop_on_plateau.patience") == 0
    assert ruled.pop("finetune.stop_on_plateau.patience") > 0
    assert capped == ruled
  # Pathfinder's smaller fine-tuning sets count patience only once validation has left chance.
  after = {n: dict(o).get("finetune.stop_on_plateau.after_passing")
           for n, o in map(sweep.parse_run, sw.runs[1:])}
  assert set(after.values()) == ({0.55} if arg == "pathfinder,data" else {None}), after
  with pytest.raises(ValueError, match="takes 'task\\[,variant\\]'"):
    config_lib.load_config("configs/sweeps/init_scales.py:cpu")


def test_plateau_study_stages_share_one_queue():
  """'task,a+b': both stages' runs in one sweep, a's first, a run the stages share listed once with
  its one spec (the same run directory)."""
  runs = lambda arg: [sweep.parse_run(r) for r in sweep.check_sweep(
      config_lib.load_config(f"configs/sweeps/lra_plateau.py:{arg}")).runs]
  a, b, both = runs("listops,a"), runs("listops,b"), runs("listops,a+b")
  assert both == a + [r for r in b if r[0] not in dict(a)]
  assert [name for name, _ in both].count("scratch") == 1
  assert config_lib.load_config("configs/sweeps/lra_plateau.py:pathfinder,c+d").output == "c+d"
  with pytest.raises(ValueError, match="joined by '\\+'"):
    config_lib.load_config("configs/sweeps/lra_plateau.py:listops,a+z")


def test_plateau_study_budgets_per_task():
  """docs/lra_cpu.md's budget table: ListOps runs both phases to their caps; Pathfinder stops on
  its plateau rules except the arms that run their whole budget by design (compute-matched, `_to_cap`
  and stage lr's other rates); stages c's and e's own arms count patience only past chance."""
  for task, pretrain, finetune in (("listops", 0, 0), ("pathfinder", 4, 12)):
    for name, overrides in (sweep.parse_run(r) for r in sweep.check_sweep(config_lib.load_config(
        f"configs/sweeps/lra_plateau.py:{task},a+b+c+d+e+lr" if task == "pathfinder"
        else f"configs/sweeps/lra_plateau.py:{task},a+b+c+e")).runs):
      whole_budget = name.endswith(("_matched", "_to_cap")) or "_lr" in name
      assert overrides["finetune.stop_on_plateau.patience"] == (0 if whole_budget else finetune), name
      # Stages c's and e's own Pathfinder arms wait for validation to leave chance; no earlier
      # stage's run changes.
      waits = task == "pathfinder" and (name.startswith("spt_") and name.split("_", 1)[1] in (
          "alibi", "rope", "alibi2d", "rope2d", "1L", "other_data") or name == "scratch_1L")
      assert overrides.get("finetune.stop_on_plateau.after_passing") == (0.55 if waits else None), \
          name
      assert overrides["finetune.num_steps"] == 10000
      if name.endswith("_matched"):  # SPT's compute, from the SPT run of the same seed
        assert overrides["finetune.match_compute_of"] == "{workdir}/spt/seed_{seed}", name
      if "pretrain.num_steps" in overrides:
        assert overrides["pretrain.stop_on_plateau.patience"] == pretrain, name


def test_plateau_study_learning_rate_stage_gives_both_arms_the_same_grid():
  """Stage lr: SPT (fine-tuning its own `spt` run's pretraining) and scratch at the same rates
  besides the configs' 5e-4; Pathfinder only (ListOps' rate was searched at fixed budgets)."""
  runs = dict(sweep.parse_run(r) for r in sweep.check_sweep(
      config_lib.load_config("configs/sweeps/lra_plateau.py:pathfinder,lr")).runs)
  rates = lambda arm: {o.get("finetune.learning_rate") for n, o in runs.items()
                       if n.split("_lr")[0] == arm}
  assert rates("spt") == rates("scratch") == {None, 1e-4, 1e-3}
  for lr in ("1e-4", "1e-3"):
    assert runs[f"spt_lr{lr}"]["finetune.init_from.source"] == "{workdir}/spt/seed_{seed}/pretrain"
    # The other rates run to the cap (a slower rate escapes chance later than the rule waits).
    assert runs[f"spt_lr{lr}"]["finetune.stop_on_plateau.patience"] == 0
    assert {k: v for k, v in runs[f"scratch_lr{lr}"].items() if k != "finetune.learning_rate"} \
        == {**runs["scratch"], "finetune.stop_on_plateau.patience": 0}
  with pytest.raises(ValueError, match="Pathfinder only"):
    config_lib.load_config("configs/sweeps/lra_plateau.py:listops,lr")



def test_init_scales_report_asks_whether_the_signature_orders_accuracy_across_runs():
  """Runs that reached the threshold, of any arm, enter; one that never did is left out; ρ is the
  rank correlation of accuracy with each signature, and PR's falls are counted."""
  script = _load_script("init_scales_report")
  run = lambda steps, acc, pr_tuned, ensd: dict(  # noqa: E731
      seed=0, steps_to=steps, test_accuracy=acc, pr_loaded=2.0, pr_tuned=pr_tuned, ensd=ensd)
  across = script.across_runs({"a": [run(500, 0.7, 1.0, 0.3), run(750, 0.8, 3.0, 0.2)],
                               "b": [run(None, 0.5, 9.0, 9.0), run(250, 0.9, 4.0, 0.1)]})
  assert [(r["arm"], r["test_accuracy"]) for r in across["runs"]] == [
      ("a", 0.7), ("a", 0.8), ("b", 0.9)]
  assert across["spearman"]["pr_tuned"]["rho"] == pytest.approx(1.0)
  assert across["spearman"]["pr_change"]["rho"] == pytest.approx(1.0)
  assert across["spearman"]["ensd"]["rho"] == pytest.approx(-1.0)
  assert across["pr_fell"] == 1


def test_init_scales_report_groups_data_size_arms_by_readout_and_draws_them(tmp_path):
  """data<percent>_<arm> rows go under their readout arm at that percentage; an unprefixed arm (the
  data sweep's own, else the scales sweep's) is the whole split; the own readout sits at LeCun's
  1/√d_model among the γ values, and a readout missing a column leaves a gap, not an error."""
  script = _load_script("init_scales_report")
  row = lambda arm, acc, ensd=None: dict(arm=arm, test_accuracy=(acc, 0.01, 3), ensd=ensd,  # noqa: E731
                                         pr_tuned=None)
  data = [row("spt", 0.78), row("data10_gamma_0.1", 0.61, (0.3, 0.1, 3)), row("data10_spt", 0.60),
          row("data30_gamma_0.1", 0.72)]
  scales = [row("spt", 0.0), row("gamma_0.1", 0.78, (0.5, 0.1, 3)), row("lambda_0.5", 0.74)]
  table = script.by_data_size(data, scales)
  assert {arm: {p: r["test_accuracy"][0] for p, r in sizes.items()}
          for arm, sizes in table.items()} == {"gamma_0.1": {10: 0.61, 30: 0.72, 100: 0.78},
                                               "spt": {10: 0.60, 100: 0.78}}
  model = config_lib.load_config("configs/pathfinder_spt.py:cpu").model
  assert script.readout_std("spt", model) == pytest.approx(1 / 8)
  assert script.readout_std("gamma_0.1", model) == 0.1
  assert script.readout_std("lambda_0.5", model) is None
  path = tmp_path / "by_data_size.png"
  script.draw_by_data_size(table, model, "t", str(path))
  assert path.stat().st_size > 10_000
