"""spt_jax's modules import one way, from the entry points down to the utilities, and never in a circle.

The layers, top to bottom (README.md, "Layout", lists the modules in this order). A module may import
modules of its own layer or of any layer below it, never one above. Every import counts: at module
level or inside a function, `import spt_jax.x`, `from spt_jax import x`, `from spt_jax.x import y`,
relative imports and `importlib.import_module("spt_jax.x")`: an import moved into a function is still
an import. A new module must be placed in a layer here, so that its place is a decision.
"""
from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "spt_jax"

# (layer, modules): 'name.*' stands for a package and every module under it; a module's own entry
# wins over its package's.
LAYERS = (
    # Command lines and tools that drive runs; nothing in spt_jax imports them.
    ("entry", ("spt_jax.sweep", "spt_jax.surgery", "spt_jax.theory.experiments",
               "spt_jax.report")),
    # A whole run: phases in order, workdir checks; hands the analysis hooks to the trainer.
    ("experiment", ("spt_jax.experiment", "spt_jax.runs")),
    # Reads finished runs (CLIs) and supplies the hooks the trainer runs (attention metrics during
    # training, the composite weights' figure): the trainer never imports it.
    ("analysis", ("spt_jax.analysis.*",)),
    # One phase from config to results.
    ("trainer", ("spt_jax.train", "spt_jax.preflight", "spt_jax.stopping")),
    # Config builders and validation: each section is checked by the module that owns it.
    ("config", ("spt_jax.config_lib",)),
    # What a phase optimises: losses, heads, masking, loss weighting.
    ("objectives", ("spt_jax.objectives.*", "spt_jax.grap", "spt_jax.masking")),
    # Models, task data, checkpoints, parameter handling, optimiser, metric files, theory models.
    ("components", ("spt_jax.models.*", "spt_jax.data.*", "spt_jax.checkpoints", "spt_jax.init_from",
                    "spt_jax.param_groups", "spt_jax.optim", "spt_jax.metric_writers",
                    "spt_jax.workdir_lock", "spt_jax.flops",
                    "spt_jax.theory.*")),
    # Trees, fault points, the platform (devices, heap, backend kernels), multi-process start-up.
    ("utilities", ("spt_jax", "spt_jax.tree", "spt_jax.faults", "spt_jax.platform",
                   "spt_jax.distributed", "spt_jax.host_memory", "spt_jax.provenance")),
)


def module_files() -> dict[str, str]:
  """{dotted module name: path} of every module of the package."""
  modules = {}
  for directory, _, files in os.walk(os.path.join(ROOT, PACKAGE)):
    for file in sorted(files):
      if file.endswith(".py"):
        path = os.path.join(directory, file)
        name = os.path.relpath(path, ROOT)[:-len(".py")].replace(os.sep, ".")
        modules[name.removesuffix(".__init__")] = path
  return modules


def _imported_names(tree: ast.AST, module: str, is_package: bool):
  """Every dotted name `tree` imports, with the line, resolving relative imports against `module`."""
  package = module if is_package else module.rpartition(".")[0]
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for alias in node.names:
        yield alias.name, node.lineno
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        parts = package.split(".")
        parent = ".".join(parts[:len(parts) - node.level + 1])
        base = f"{parent}.{base}" if base else parent
      for alias in node.names:  # b of `from a import b`: a submodule, or a name defined in a
        yield f"{base}.{alias.name}", node.lineno
    elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
          and isinstance(node.args[0].value, str)
          and ((isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
               or (isinstance(node.func, ast.Name) and node.func.id in ("import_module",
                                                                        "__import__")))):
      yield node.args[0].value, node.lineno


def import_graph(modules: dict[str, str]) -> dict[str, dict[str, int]]:
  """{module: {imported spt_jax module: first line}}, the innermost existing module of each name."""
  graph = {}
  for module, path in modules.items():
    with open(path) as f:
      tree = ast.parse(f.read(), path)
    edges = {}
    for name, line in _imported_names(tree, module, path.endswith("__init__.py")):
      if name != PACKAGE and not name.startswith(PACKAGE + "."):
        continue
      while name not in modules:  # `from spt_jax.data.vocab import PAD_ID` → spt_jax.data.vocab
        name = name.rpartition(".")[0]
      if name != module:
        edges.setdefault(name, line)
    graph[module] = edges
  return graph


def layer_of(module: str) -> tuple[int, str] | None:
  """(index from the top, layer name) of `module`, or None when no entry of LAYERS covers it."""
  best = None
  for index, (layer, entries) in enumerate(LAYERS):
    for entry in entries:
      if entry.endswith(".*"):
        package = entry[:-2]
        if module == package or module.startswith(package + "."):
          specificity = len(package) + 0.5 * (module != package)
        else:
          continue
      elif module == entry:
        specificity = len(entry) + 1
      else:
        continue
      if best is None or specificity > best[0]:
        best = (specificity, index, layer)
  return None if best is None else best[1:]


def find_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
  """One closed path per strongly connected component of more than one module (Tarjan)."""
  index, low, stack, on_stack, components = {}, {}, [], set(), []

  def visit(v):
    index[v] = low[v] = len(index)
    stack.append(v)
    on_stack.add(v)
    for w in sorted(graph.get(v, ())):
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on_stack:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      component = []
      while True:
        w = stack.pop()
        on_stack.discard(w)
        component.append(w)
        if w == v:
          break
      if len(component) > 1:
        components.append(set(component))

  for v in sorted(graph):
    if v not in index:
      visit(v)
  return [_cycle_through(component, graph) for component in components]


def _cycle_through(component: set[str], graph) -> list[str]:
  """A shortest closed path inside `component`, from its first module back to it."""
  start = min(component)
  paths, seen = [[start]], {start}
  while paths:
    path = paths.pop(0)
    for w in sorted(graph[path[-1]]):
      if w == start:
        return path + [start]
      if w in component and w not in seen:
        seen.add(w)
        paths.append(path + [w])
  raise AssertionError(f"no cycle through {start} in {sorted(component)}")


@pytest.fixture(scope="module")
def modules():
  return module_files()


@pytest.fixture(scope="module")
def graph(modules):
  return import_graph(modules)


def test_every_module_has_a_layer(modules):
  missing = sorted(m for m in modules if layer_of(m) is None)
  assert not missing, f"modules in no layer of tests/test_layering.py's LAYERS: {missing}"
  stale = [(layer, entry) for layer, entries in LAYERS for entry in entries
           if not any(m == entry or (entry.endswith(".*") and (m == entry[:-2]
                                                               or m.startswith(entry[:-1])))
                      for m in modules)]
  assert not stale, f"LAYERS names modules that do not exist: {stale}"


def test_no_import_cycle(graph):
  cycles = find_cycles(graph)
  assert not cycles, "import cycles:\n  " + "\n  ".join(
      " -> ".join(f"{m} (line {graph[m][n]})" if n else m for m, n in zip(c, c[1:] + [None]))
      for c in cycles)


def test_no_upward_import(graph, modules):
  upward = []
  for module, edges in sorted(graph.items()):
    (low, low_name) = layer_of(module)
    for imported, line in sorted(edges.items()):
      (high, high_name) = layer_of(imported)
      if high < low:
        upward.append(f"{modules[module][len(ROOT) + 1:]}:{line}: {module} ({low_name}) imports "
                      f"{imported} ({high_name}), a higher layer")
  assert not upward, "imports from a lower layer into a higher one:\n  " + "\n  ".join(upward)


def test_the_checks_see_what_they_should():
  """The parser and the checks on a made-up package: function-level, relative and importlib
  imports count, a cycle is named, a module of no layer is none."""
  source = ("import os\n"
            "from spt_jax import tree\n"
            "def f():\n"
            "  from . import train\n"
            "  from .models.transformer import Encoder\n"
            "  importlib.import_module('spt_jax.analysis.plots')\n")
  names = {n for n, _ in _imported_names(ast.parse(source), "spt_jax.optim", False)}
  assert {"spt_jax.tree", "spt_jax.train", "spt_jax.models.transformer.Encoder",
          "spt_jax.analysis.plots"} <= names and "os" in names
  cycle = find_cycles({"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3}, "d": {"a": 4}})
  assert cycle == [["a", "b", "c", "a"]]
  assert layer_of("spt_jax.analysis.attention")[1] == "analysis"
  assert layer_of("spt_jax.theory.experiments")[1] == "entry"
  assert layer_of("spt_jax.theory.diagonal")[1] == "components"
  assert layer_of("spt_jax.somewhere_new") is None


def test_only_the_platform_module_asks_which_backend_it_runs_on(modules):
  """Backend-dependent choices live in spt_jax/platform.py: elsewhere no `jax.default_backend()` and
  no comparison of a device's `.platform`."""
  asking = []
  for module, path in sorted(modules.items()):
    if module == "spt_jax.platform":
      continue
    with open(path) as f:
      tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
      if isinstance(node, ast.Attribute) and node.attr == "default_backend":
        asking.append(f"{module}:{node.lineno}: default_backend")
      elif isinstance(node, ast.Compare) and any(
          isinstance(side, ast.Attribute) and side.attr == "platform"
          for side in [node.left, *node.comparators]):
        asking.append(f"{module}:{node.lineno}: compares .platform")
  assert not asking, "backend questions outside spt_jax/platform.py:\n  " + "\n  ".join(asking)


def test_readme_layout_lists_every_module_in_its_layer(modules):
  """README.md's Layout: one `[layer]` heading per layer of LAYERS, in order, and under each one
  every module of that layer, by its path or as a file name after its package's directory."""
  with open(os.path.join(ROOT, "README.md")) as f:
    readme = f.read()
  layout = readme[readme.index("## Layout"):]
  layout = layout[layout.index("```") + 3:]
  layout = layout[:layout.index("```")]
  headings = [line[1:-1] for line in layout.splitlines() if line.startswith("[")]
  assert headings == [layer for layer, _ in LAYERS], headings
  blocks = dict(zip(headings, layout.split("\n[")[1:]))
  missing = []
  for module, path in sorted(modules.items()):
    if module == PACKAGE:
      continue
    block = blocks[layer_of(module)[1]]
    relative = os.path.relpath(path, ROOT)
    directory, file = os.path.split(relative)
    listed = (relative in block or (file == "__init__.py" and f"{directory}/" in block)
              or (f"{directory}/" in block and file in block))
    if not listed:
      missing.append(f"{relative} (layer {layer_of(module)[1]})")
  assert not missing, "README.md's Layout does not list, in its layer:\n  " + "\n  ".join(missing)
