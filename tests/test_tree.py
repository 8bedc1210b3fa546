import numpy as np
import pytest

from spt_jax import tree

PARAMS = {"encoder": {"layer_0": {"attention": {"query": {"kernel": np.ones((4, 2, 2), np.float32)},
                                                "key": {"kernel": np.ones((4, 2, 2), np.float32)}}}},
          "classifier": {"kernel": np.zeros((4, 3), np.float32), "bias": np.zeros(3, np.float32)}}


def test_flatten_unflatten_round_trip():
  flat = tree.flatten(PARAMS)
  assert "encoder/layer_0/attention/query/kernel" in flat
  assert tree.flatten(tree.unflatten(flat)).keys() == flat.keys()


def test_patterns_full_match_and_fail_loudly_with_suggestions():
  paths = list(tree.flatten(PARAMS))
  assert tree.match_patterns([r".*/(query|key)/kernel"], paths, what="t") == [
      "encoder/layer_0/attention/key/kernel", "encoder/layer_0/attention/query/kernel"]
  # Full match: a bare component is not a substring search.
  with pytest.raises(ValueError, match="matches no parameter.*close matches.*query/kernel"):
    tree.match_patterns(["encoder/layer_0/attention/querry/kernel"], paths, what="t")
  with pytest.raises(ValueError, match="not a valid regular expression"):
    tree.match_patterns(["(unclosed"], paths, what="t")


def test_select_include_minus_exclude():
  paths = list(tree.flatten(PARAMS))
  chosen = tree.select(paths, [".*"], ["classifier/.*"], what="t")
  assert chosen == [p for p in paths if not p.startswith("classifier")]


def test_merge_copies_exactly_selected_paths_and_checks_shapes():
  source = {"encoder": {"layer_0": {"attention": {
      "query": {"kernel": np.full((4, 2, 2), 7, np.float32)},
      "key": {"kernel": np.full((4, 2, 2), 8, np.float32)}}}}}
  merged = tree.merge(PARAMS, source, ["encoder/layer_0/attention/query/kernel"],
                      target_name="model", source_name="ckpt")
  flat = tree.flatten(merged)
  assert (flat["encoder/layer_0/attention/query/kernel"] == 7).all()
  assert (flat["encoder/layer_0/attention/key/kernel"] == 1).all()
  bad = {"classifier": {"kernel": np.zeros((5, 3), np.float32)}}
  with pytest.raises(ValueError, match=r"classifier/kernel: model has \(4, 3\) float32, ckpt has "
                                       r"\(5, 3\) float32"):
    tree.merge(PARAMS, bad, ["classifier/kernel"], target_name="model", source_name="ckpt")
  with pytest.raises(ValueError, match="in ckpt but not in model"):
    tree.merge(PARAMS, {"extra": np.zeros(1)}, ["extra"], target_name="model", source_name="ckpt")


def test_check_compatible_names_every_problem():
  other = tree.unflatten({**tree.flatten(PARAMS), "classifier/kernel": np.zeros((4, 9), np.float32)})
  with pytest.raises(ValueError, match=r"classifier/kernel: model has \(4, 3\).*ckpt has \(4, 9\)"):
    tree.check_compatible(PARAMS, other, expected_name="model", found_name="ckpt")
