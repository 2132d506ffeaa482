"""The built-in task suite: real scikit-learn data plus secret-seeded synthetic problems.

Most tasks fit in well under a second so training runs on a laptop; `large_clf` and
`large_reg` take seconds per reasonable fit so that execution cost is real. Held-out tasks
are only ever used for evaluation.
"""
from __future__ import annotations

from typing import Dict

from wmrl.domains.research.tasks.spec import TaskSpec

_FAST, _SLOW = 10.0, 30.0
# SVM and MLP references need minutes on thousands of rows; the rest span the same range of skill.
_LARGE_REFS = ("dummy", "naive_bayes", "logreg", "knn", "stump", "tree", "forest", "boosting")
_LARGE_REG_REFS = ("dummy", "linear", "lasso", "knn", "stump", "tree", "forest", "boosting")

BUILTIN: Dict[str, TaskSpec] = {s.name: s for s in [
    TaskSpec("digits", "bundled:digits", "classification", "accuracy", _FAST,
             description="Recognise handwritten digits 0-9 from 8x8 images (64 pixel intensities; disguised: noisy, secretly mixed features)."),
    TaskSpec("wine", "bundled:wine", "classification", "accuracy", _FAST,
             description="Tell 3 wine cultivars apart from 13 chemical measurements (disguised: noisy, secretly mixed features)."),
    TaskSpec("breast_cancer", "bundled:breast_cancer", "classification", "balanced_accuracy", _FAST,
             description="Diagnose tumours as malignant or benign from 30 cell-nucleus measurements (disguised: noisy, secretly mixed features)."),
    TaskSpec("diabetes", "bundled:diabetes", "regression", "r2", _FAST,
             description="Predict disease progression after one year from 10 baseline patient variables (disguised: noisy, secretly mixed features)."),
    TaskSpec("moons", "synthetic:make_moons", "classification", "accuracy", _FAST,
             params={"n_samples": 1500, "noise": 0.3},
             description="Two interleaving half-moons in 2-D with heavy noise."),
    TaskSpec("hastie", "synthetic:make_hastie_10_2", "classification", "accuracy", _FAST,
             params={"n_samples": 3000},
             description="Binary target: whether the sum of squares of 10 Gaussian features exceeds a threshold."),
    TaskSpec("friedman1", "synthetic:make_friedman1", "regression", "r2", _FAST,
             params={"n_samples": 2000, "n_features": 10, "noise": 1.0},
             description="Nonlinear target of 5 uniform features (sin, square, linear terms); 5 more are noise."),
    TaskSpec("sparse_linear", "synthetic:make_regression", "regression", "r2", _FAST,
             params={"n_samples": 800, "n_features": 60, "n_informative": 8, "noise": 20.0},
             description="Noisy linear target of 60 Gaussian features of which only a few matter."),
    TaskSpec("large_clf", "synthetic:make_classification", "classification", "accuracy", _SLOW,
             params={"n_samples": 15000, "n_features": 40, "n_informative": 20, "n_redundant": 5,
                     "n_classes": 3, "class_sep": 0.8, "flip_y": 0.03},
             references=_LARGE_REFS,
             description="3 classes from 40 features (20 informative, 5 redundant, the rest noise), 3% label noise."),
    TaskSpec("large_reg", "synthetic:make_friedman1", "regression", "r2", _SLOW,
             params={"n_samples": 8000, "n_features": 15, "noise": 1.0},
             references=_LARGE_REG_REFS,
             description="Nonlinear target of 5 uniform features (sin, square, linear terms); 10 more are noise."),
    # Held out: evaluation only.
    TaskSpec("iris", "bundled:iris", "classification", "accuracy", _FAST, held_out=True,
             description="Classify 3 iris species from 4 flower measurements (disguised: noisy, secretly mixed features)."),
    TaskSpec("circles", "synthetic:make_circles", "classification", "accuracy", _FAST, held_out=True,
             params={"n_samples": 1500, "noise": 0.2, "factor": 0.5},
             description="Two noisy concentric circles in 2-D: inner vs outer."),
    TaskSpec("friedman2", "synthetic:make_friedman2", "regression", "r2", _FAST, held_out=True,
             params={"n_samples": 1500, "noise": 100.0},
             description="Impedance-like nonlinear target of 4 uniform features on very different scales."),
    # More held-out tasks (issue 13) so that one evaluation's mean is known to about +-0.03: small,
    # fast-fitting generated problems unlike every training task (no generator shared with one).
    TaskSpec("quantiles", "synthetic:make_gaussian_quantiles", "classification", "accuracy", _FAST, held_out=True,
             params={"n_samples": 800, "n_features": 4, "n_classes": 3},
             description="3 classes cut from a 4-D Gaussian by nested spheres of equal probability."),
    TaskSpec("clf_small", "synthetic:make_classification", "classification", "balanced_accuracy", _FAST,
             held_out=True,
             params={"n_samples": 800, "n_features": 12, "n_informative": 4, "n_redundant": 2,
                     "n_classes": 2, "weights": [0.7], "flip_y": 0.05, "class_sep": 1.0},
             description="Imbalanced binary target (70/30) from 12 features, 4 informative and 2 redundant, 5% label noise."),
    TaskSpec("friedman3", "synthetic:make_friedman3", "regression", "r2", _FAST, held_out=True,
             params={"n_samples": 800, "noise": 0.1},
             description="Arctangent of a ratio of 4 uniform features on very different scales, with noise."),
    TaskSpec("sparse_uncorr", "synthetic:make_sparse_uncorrelated", "regression", "r2", _FAST, held_out=True,
             params={"n_samples": 600, "n_features": 10},
             description="Linear target of 4 of 10 independent Gaussian features; the other 6 are noise."),
    # Script tasks (issue 11): the agent writes a whole program over real-looking files. Optional, so
    # default runs keep their suite; name them in task.train / task.eval.
    TaskSpec("loan_default", "generated:loan_default", "classification", "roc_auc", 20.0, interface="script",
             target="default", id_column="loan_id", optional=True,
             description="Loan defaults from a messy applicant table (categorical columns, empty cells); ROC AUC."),
    TaskSpec("house_prices", "generated:house_prices", "regression", "neg_root_mean_squared_error", 20.0,
             interface="script", target="price", id_column="house_id", optional=True,
             description="House sale prices from neighbourhood, area, condition and more (empty cells); RMSE."),
    # Table tasks (issue 27): build() gets a DataFrame with categorical columns and empty cells, scored by
    # metrics no training task uses. Optional and held out: a family for transfer evaluation (eval/family/tables).
    TaskSpec("loan_table", "generated-table:loan_default", "classification", "roc_auc", 20.0, held_out=True,
             target="default", id_column="loan_id", optional=True,
             description="Whether a personal loan defaults, from the applicant's age, income, employment, region, "
                         "the loan's purpose and amount, and credit lines; categorical columns, empty cells; ROC AUC."),
    TaskSpec("house_table", "generated-table:house_prices", "regression", "neg_root_mean_squared_error", 20.0,
             held_out=True, target="price", id_column="house_id", optional=True,
             description="House sale prices from neighbourhood, living area, rooms, year built, condition and garage; "
                         "categorical columns, empty cells; RMSE."),
]}
