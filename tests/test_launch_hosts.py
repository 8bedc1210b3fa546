"""What a launch on accelerator hosts relies on, checked here on CPU: the host heap is kept only
where the CPU backend runs, the mesh lists devices in process order (the global row order of a
batch), and a single process's SIGTERM handling (main.py installs it; outside a training loop the
signal still ends the process).
"""
from __future__ import annotations

import dataclasses
import signal
import subprocess
import sys

import jax
import pytest

from conftest import ROOT
from spt_jax import distributed, experiment, host_memory, platform


@pytest.mark.parametrize("platforms, expected", [("cpu", True), ("tpu", False), ("cuda,cpu", False),
                                                 ("cpu,tpu", True)])
def test_the_cpu_backend_is_foreseen_from_jax_platforms(platforms, expected):
  assert platform.expects_cpu_backend(platforms) is expected


def test_without_jax_platforms_an_installed_accelerator_plugin_decides(monkeypatch):
  import importlib.metadata
  import importlib.util
  no_plugins = (list(importlib.metadata.entry_points(group="jax_plugins")) == []
                and importlib.util.find_spec("libtpu") is None)
  assert platform.expects_cpu_backend("") is no_plugins  # this machine: jaxlib for CPU alone
  real = importlib.util.find_spec
  monkeypatch.setattr(importlib.util, "find_spec",
                      lambda name, *a: object() if name == "libtpu" else real(name, *a))
  assert not platform.expects_cpu_backend("")


def test_the_host_heap_is_kept_only_for_the_cpu_backend(monkeypatch):
  calls = []
  monkeypatch.setattr(host_memory, "retain_freed_memory", lambda: calls.append("retain"))
  monkeypatch.setattr(platform, "split_cpu_into_devices", lambda config, n: 1)
  monkeypatch.setattr(platform, "expects_cpu_backend", lambda: False)
  platform.configure_process(None, 1, True)
  assert calls == []
  monkeypatch.setattr(platform, "expects_cpu_backend", lambda: True)
  platform.configure_process(None, 1, True)
  assert calls == ["retain"]
  # Kept, yet the backend is not the CPU: given back once the step is compiled, whatever its size.
  released = []
  monkeypatch.setattr(host_memory, "retained", lambda: True)
  monkeypatch.setattr(host_memory, "release", lambda: released.append(True))
  monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
  platform.fit_heap_to_step(1, devices=1)
  assert released == [True]


@dataclasses.dataclass(frozen=True)
class _Device:
  id: int
  process_index: int


def test_the_mesh_lists_each_process_devices_together_in_process_order():
  # As jax.make_mesh may order a pod's devices by physical position, interleaving the hosts.
  topology = [_Device(i, p) for i, p in enumerate([1, 0, 0, 1, 2, 2, 0, 1])]
  ordered = experiment.process_ordered(topology)
  assert [d.process_index for d in ordered] == [0, 0, 0, 1, 1, 1, 2, 2]
  assert [d.id for d in ordered] == [1, 2, 6, 0, 3, 7, 4, 5]  # each process's own order kept
  mesh = experiment.make_mesh()
  assert list(mesh.devices.reshape(-1)) == experiment.process_ordered(jax.devices())
  assert mesh.axis_names == ("data",)


def test_a_single_process_handles_sigterm_and_a_multi_process_one_leaves_it_to_xla():
  previous = signal.getsignal(signal.SIGTERM)
  try:
    assert distributed.maybe_initialize({}) is False
    assert signal.getsignal(signal.SIGTERM) == distributed._on_sigterm
  finally:
    signal.signal(signal.SIGTERM, previous)
  assert not distributed.stop_requested()  # no signal, no jax.distributed: never a stop


def test_sigterm_outside_a_training_loop_ends_the_process_as_before():
  out = subprocess.run([sys.executable, "-c", "import os, signal, time; from spt_jax import "
                        "distributed; distributed.handle_sigterm(); os.kill(os.getpid(), "
                        "signal.SIGTERM); time.sleep(30)"], cwd=ROOT, timeout=60)
  assert out.returncode == -signal.SIGTERM
