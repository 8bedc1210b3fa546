import numpy as np

from spt_jax.data import synthetic


def _counts(inputs, vocab_size):
  return np.stack([np.bincount(row, minlength=vocab_size) for row in inputs]).astype(np.float64)


def _logistic_regression(x, y, steps=3000, lr=0.5):
  mu, sd = x.mean(0), x.std(0) + 1e-9
  x = (x - mu) / sd
  w, b = np.zeros(x.shape[1]), 0.0
  for _ in range(steps):
    p = 1 / (1 + np.exp(-(x @ w + b)))
    w -= lr * x.T @ (p - y) / len(y)
    b -= lr * (p - y).mean()
  return lambda z: ((z - mu) / sd) @ w + b > 0


def test_labels_depend_on_adjacency_only():
  spec = synthetic.Spec(num_train=400, num_val=10, num_test=10)
  data = synthetic.load_splits(spec)["train"]
  a, b = spec.vocab.id_of("A"), spec.vocab.id_of("B")
  for row, label in zip(data["inputs"], data["labels"]):
    (i,), (j,) = np.flatnonzero(row == a), np.flatnonzero(row == b)
    assert (j == i + 1) == bool(label) and (label or abs(i - j) >= 2)
  assert abs(data["labels"].mean() - 0.5) < 0.01


def test_bag_of_tokens_classifier_is_at_chance():
  spec = synthetic.Spec(num_train=8000, num_val=10, num_test=4000)
  splits = synthetic.load_splits(spec)
  size = spec.vocab.size
  predict = _logistic_regression(_counts(splits["train"]["inputs"], size),
                                 splits["train"]["labels"])
  accuracy = (predict(_counts(splits["test"]["inputs"], size)) == splits["test"]["labels"]).mean()
  # 4000 test examples: chance ± 3 standard deviations is 0.5 ± 0.024.
  assert abs(accuracy - 0.5) < 0.024, accuracy


def test_background_has_local_structure():
  spec = synthetic.Spec(num_train=200, num_val=10, num_test=10)
  x = synthetic.load_splits(spec)["train"]["inputs"].astype(int) - 3
  successor = ((x[:, 1:] - x[:, :-1]) % spec.num_background == 1) & (x[:, 1:] < spec.num_background)
  assert successor.mean() > 0.75  # p_successor 0.8 plus chance hits, minus the inserted A and B
