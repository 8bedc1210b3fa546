"""The user-facing Markdown (README.md, docs/*.md, benchmarks/README.md) names only things that exist
in the repository, and nothing outside it.

What is checked:

1. Every relative Markdown link `[text](target)` or `![alt](target)` resolves, from the file's own
   directory, to a file or directory of the repository. URLs (`scheme:`), in-page anchors (`#...`)
   and mail links are not paths; a link's own `#anchor` is dropped before the check.
2. Every repository path named in the text, in code spans, code blocks or prose, exists relative to
   the repository root: a token starting with `configs/`, `docs/`, `scripts/`, `benchmarks/`,
   `spt_jax/`, `launch/`, `tests/` or `notebooks/` (not preceded by a path or name character, so
   `lra_benchmarks/...` or `runs/x/configs/...` do not count). Not checked, because a run or the
   reader supplies them: tokens with a placeholder (`<task>`, `*`, `...`, `$`) and anything after
   `:` (a config variant such as `configs/x.py:smoke`) or `::` (a test id). Braces are alternatives
   and each is checked: `docs/results/sweep_{freezing,hybrid_init}_cpu.{md,csv}` names four files.
   Paths ending in `.yaml` are Amos et al.'s Hydra configs, cited by docs/configs.md as the source
   of a value; this repository has no YAML configs, so they are never its own paths.
3. No user-facing Markdown names `../shared` (a directory outside the repository) or an internal
   tracker's issue number: text matching `\\b[Ii]ssue #?\\d+`. A reference to another repository's
   issue is allowed when the repository is named right before it, e.g. "long-range-arena issue #52"
   or "LRA issue #60": the words before "issue" on the same line must end with one of
   EXTERNAL_REPOSITORIES (optionally followed by "'s"). A GitHub URL (`.../issues/52`) never matches.
"""
from __future__ import annotations

import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Repositories other than this one whose issues the docs may cite by number.
EXTERNAL_REPOSITORIES = ("long-range-arena", "LRA", "not-from-scratch", "pathfinder", "jax", "flax",
                         "orbax", "big_vision", "S5", "s4")

PREFIXES = ("configs", "docs", "scripts", "benchmarks", "spt_jax", "launch", "tests", "notebooks")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*([^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")
PATH = re.compile(r"(?<![\w./-])((?:%s)/[\w./{},<>*$-]*)" % "|".join(PREFIXES))
PLACEHOLDER = re.compile(r"[<>*$]|\.\.\.")
BRACES = re.compile(r"\{([^{}]*)\}")
ISSUE = re.compile(r"\b[Ii]ssue #?\d+")
EXTERNAL = re.compile(r"(?:%s)(?:'s)?\s+$" % "|".join(re.escape(r) for r in EXTERNAL_REPOSITORIES))


def user_facing_markdown() -> list[str]:
  files = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "benchmarks", "README.md")]
  files += sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
  return [f for f in files if os.path.exists(f)]


def _rel(path: str) -> str:
  return os.path.relpath(path, ROOT)


def broken_links(path: str, text: str) -> list[str]:
  broken = []
  for lineno, line in enumerate(text.splitlines(), 1):
    for target in LINK.findall(line):
      if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("#"):
        continue
      target = target.split("#", 1)[0]
      if not os.path.exists(os.path.normpath(os.path.join(os.path.dirname(path), target))):
        broken.append(f"{_rel(path)}:{lineno}: link ({target})")
  return broken


def _expand(token: str) -> list[str]:
  match = BRACES.search(token)
  if not match:
    return [token]
  return [expanded for choice in match.group(1).split(",")
          for expanded in _expand(token[:match.start()] + choice + token[match.end():])]


def named_paths(line: str) -> list[str]:
  """The repository paths a line names, as written (trimmed of trailing punctuation), braces
  expanded."""
  names = []
  for token in PATH.findall(line):
    token = token.split("::", 1)[0].split(":", 1)[0].rstrip(".,;")
    if not token or PLACEHOLDER.search(token) or token.endswith(".yaml"):
      continue
    names += [name.rstrip(".,;") for name in _expand(token)]
  return names


def missing_paths(path: str, text: str) -> list[str]:
  missing = []
  for lineno, line in enumerate(text.splitlines(), 1):
    for name in named_paths(line):
      if not os.path.exists(os.path.join(ROOT, name)):
        missing.append(f"{_rel(path)}:{lineno}: {name}")
  return missing


def outside_references(path: str, text: str) -> list[str]:
  found = []
  for lineno, line in enumerate(text.splitlines(), 1):
    if "../shared" in line:
      found.append(f"{_rel(path)}:{lineno}: ../shared")
    for match in ISSUE.finditer(line):
      if not EXTERNAL.search(line[:match.start()]):
        found.append(f"{_rel(path)}:{lineno}: {match.group(0)!r} (name the external repository "
                     "before it, or describe the change instead of citing an internal issue)")
  return found


def test_the_checks_catch_what_they_should():
  assert named_paths("see `configs/listops_spt.py:smoke` and docs/data.md.") == [
      "configs/listops_spt.py", "docs/data.md"]
  assert named_paths("`configs/<task>_spt.py`, lra_benchmarks/data/listops.py, x/docs/y") == []
  assert named_paths("`benchmarks/results/train_step_listops.{md,json}`") == [
      "benchmarks/results/train_step_listops.md", "benchmarks/results/train_step_listops.json"]
  assert named_paths("Amos et al.'s configs/model/transformer.yaml") == []
  assert outside_references("x.md", "fixed in issue 21; see Issue #19") != []
  assert len(outside_references("x.md", "fixed in issue 21; see Issue #19")) == 2
  assert outside_references("x.md", "long-range-arena issue #52 and LRA issue #60") == []
  assert outside_references("x.md", "`../shared/research-brief.md`") != []
  assert broken_links(os.path.join(ROOT, "README.md"), "[a](https://x.org) [b](#c) [d](docs/)") == []
  assert broken_links(os.path.join(ROOT, "README.md"), "[a](docs/no_such_file.md)") != []


def test_every_relative_link_resolves():
  broken = [b for f in user_facing_markdown() for b in broken_links(f, open(f).read())]
  assert not broken, "Markdown links to paths that do not exist:\n  " + "\n  ".join(broken)


def test_every_named_repository_path_exists():
  missing = [m for f in user_facing_markdown() for m in missing_paths(f, open(f).read())]
  assert not missing, "Markdown names repository paths that do not exist:\n  " + "\n  ".join(missing)


def test_no_reference_outside_the_repository_or_to_internal_issues():
  found = [r for f in user_facing_markdown() for r in outside_references(f, open(f).read())]
  assert not found, ("User-facing Markdown points outside the repository:\n  " + "\n  ".join(found))


def test_readme_opens_with_the_two_set_up_commands():
  """The first two code blocks are the main job and the test command, each with its install, as a
  newcomer copies them; changing either is a deliberate edit of this test too."""
  readme = open(os.path.join(ROOT, "README.md")).read()
  blocks = re.findall(r"```[a-z]*\n(.*?)```", readme, re.S)
  assert [b.strip() for b in blocks[:2]] == [
      "pip install -e . && python main.py --config=configs/synthetic_spt.py "
      "--workdir=runs/synthetic_spt",
      "pip install -e '.[test]' && python -m pytest -q"]


def test_readme_indexes_every_doc():
  readme = open(os.path.join(ROOT, "README.md")).read()
  unlisted = [_rel(f) for f in glob.glob(os.path.join(ROOT, "docs", "*.md"))
              if f"({_rel(f)})" not in readme]
  assert not unlisted, "README.md does not link these docs: " + ", ".join(sorted(unlisted))
