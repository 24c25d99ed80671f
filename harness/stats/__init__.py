"""Pure statistics of trial outcomes: numpy, scipy and `harness.core` only (no store, no
rendering, no ranking; pyproject.toml [tool.importlinter]).

- `outcomes`: a metric's value of a trial, the tuned sweep points, the method x seed matrix;
- `intervals`: intervals of means and medians (Student-t, bootstrap, order statistics);
- `paired`: paired t-tests, Holm, the sign test, power and seeds needed;
- `examples`: per-example intervals and tests (Wilson, McNemar, weighted bootstrap);
- `sequential`: anytime-valid confidence sequences, looks, conditional power;
- `ties`: the rank intervals that pairwise tests allow (tie groups).
"""
