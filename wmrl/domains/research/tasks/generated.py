"""Built-in script tasks made from data we generate: messy tables as real competitions ship them.

Rows come from a secret-seeded generator (so no program can hold a copy), with categorical
and free-text columns, missing cells and an id column; the folder is written once per secret
under the host cache dir, which the sandbox never mounts.
"""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, Tuple

import numpy as np

from wmrl.domains.research.tasks.secret import rng_for

if TYPE_CHECKING:
    import pandas as pd

N_ROWS = 1600
TEST_SHARE = 0.3


def _missing(rng: np.random.Generator, values: np.ndarray, share: float) -> np.ndarray:
    out = values.astype(object)
    out[rng.random(len(values)) < share] = None
    return out


def loan_default(rng: np.random.Generator):
    """Binary, imbalanced (about 1 in 6 default), scored by ROC AUC on predicted probabilities."""
    import pandas as pd

    n = N_ROWS
    employment = rng.choice(["salaried", "self-employed", "unemployed", "retired", "student"], n,
                            p=[0.55, 0.15, 0.1, 0.12, 0.08])
    region = rng.choice(["north", "south", "east", "west", "centre", "islands"], n)
    age = rng.integers(19, 80, n)
    income = np.round(np.exp(rng.normal(10.3, 0.5, n)) * np.where(employment == "unemployed", 0.3, 1.0), -1)
    lines = rng.poisson(3, n)
    amount = np.round(income * rng.uniform(0.05, 0.8, n), -1)
    purpose = rng.choice(["car", "home improvement", "debt consolidation", "education", "holiday"], n)
    risk = {"salaried": -0.6, "self-employed": 0.2, "unemployed": 1.2, "retired": -0.2, "student": 0.5}
    logit = (-1.9 + 2.2 * amount / income + np.vectorize(risk.get)(employment) + 0.18 * (lines - 3)
             - 0.015 * (age - 45) + 0.5 * (purpose == "holiday") + 0.4 * (region == "islands") + rng.normal(0, 0.6, n))
    default = np.where(rng.random(n) < 1 / (1 + np.exp(-logit)), "yes", "no")
    df = pd.DataFrame({"loan_id": np.arange(100001, 100001 + n), "age": _missing(rng, age, 0.08),
                       "income": _missing(rng, income, 0.12), "employment": _missing(rng, employment, 0.05),
                       "region": region, "purpose": purpose, "credit_lines": lines, "amount": amount,
                       "default": default})
    spec = {"kind": "classification", "metric": "roc_auc", "target": "default", "id_column": "loan_id"}
    text = ("Predict whether a personal loan defaults. Each row is a loan: applicant age, yearly income, employment, "
            "region, the loan's purpose and amount, and open credit lines; some cells are empty. About one loan in six "
            "defaults. Submit, for every loan_id of test.csv, the probability that `default` is \"yes\".")
    return df, spec, text, lambda test: test.assign(default=0.5)[["loan_id", "default"]]


def house_prices(rng: np.random.Generator):
    """Regression on a skewed price, scored by RMSE; categorical, ordinal and text-like columns."""
    import pandas as pd

    n = N_ROWS
    hood = rng.choice(["Old Town", "Riverside", "Hillcrest", "Docklands", "Meadows", "Station", "Parkview"], n)
    level = {"Old Town": 1.3, "Riverside": 1.2, "Hillcrest": 1.1, "Docklands": 0.9, "Meadows": 0.8, "Station": 0.7,
             "Parkview": 1.0}
    condition = rng.choice(["poor", "fair", "good", "excellent"], n, p=[0.1, 0.3, 0.45, 0.15])
    cond = {"poor": 0.8, "fair": 0.93, "good": 1.0, "excellent": 1.12}
    area = np.round(rng.gamma(6, 18, n), 1)
    rooms = np.clip(np.round(area / 25 + rng.normal(0, 0.8, n)), 1, 12).astype(int)
    year = rng.integers(1890, 2024, n)
    garage = rng.choice(["yes", "no"], n, p=[0.4, 0.6])
    price = (2400 * area * np.vectorize(level.get)(hood) * np.vectorize(cond.get)(condition)
             * (1 + 0.08 * (garage == "yes")) * (1 - 0.0015 * np.clip(2024 - year - 30, 0, None))
             * np.exp(rng.normal(0, 0.12, n)))
    df = pd.DataFrame({"house_id": np.arange(1, n + 1), "neighbourhood": hood, "area_m2": _missing(rng, area, 0.05),
                       "rooms": rooms, "year_built": _missing(rng, year, 0.15), "condition": condition,
                       "garage": _missing(rng, garage, 0.1), "price": np.round(price, -2)})
    spec = {"kind": "regression", "metric": "neg_root_mean_squared_error", "target": "price", "id_column": "house_id"}
    text = ("Predict the sale price of houses in one city from neighbourhood, living area, rooms, year built, condition "
            "(poor/fair/good/excellent) and garage; some cells are empty. Submit the predicted `price` for every "
            "house_id of test.csv.")
    return df, spec, text, lambda test: test.assign(price=0.0)[["house_id", "price"]]


GENERATORS: Dict[str, Callable[[np.random.Generator], Tuple]] = {"loan_default": loan_default,
                                                                  "house_prices": house_prices}


def table(name: str, secret: str) -> "pd.DataFrame":
    """Generator `name`'s rows for this secret as a labelled table, through CSV as a user's file would come (its
    blanks empty cells, its types inferred): the data of a table task (`generated-table:NAME`). Its own
    stream, so its rows are not the script task's."""
    import io

    import pandas as pd

    df, _, _, _ = GENERATORS[name](rng_for(secret, name, "table"))
    return pd.read_csv(io.StringIO(df.to_csv(index=False)))


def materialize(name: str, cache_dir: Path, secret: str) -> Path:
    """The task folder of generated task `name` for this secret, written once (atomically)."""
    tag = hashlib.sha256(f"{secret}|{name}|v1".encode()).hexdigest()[:12]
    folder = Path(cache_dir) / "generated" / f"{name}-{tag}"
    if folder.is_dir():
        return folder
    rng = rng_for(secret, name, "generate")
    df, spec, text, sample = GENERATORS[name](rng)
    order = rng.permutation(len(df))
    n_test = int(round(TEST_SHARE * len(df)))
    train, test = df.iloc[order[n_test:]], df.iloc[order[:n_test]]
    tmp = folder.with_name(f".{folder.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    write_folder(tmp, train, test.drop(columns=[spec["target"]]), test[[spec["id_column"], spec["target"]]],
                 sample(test), text, {"name": name, "interface": "script", **spec})
    try:
        os.rename(tmp, folder)
    except OSError:  # another process made it first
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def write_folder(folder: Path, train, test, answers, sample, description: str, fields: dict) -> None:
    """A task folder in the layout of wmrl/domains/research/tasks/script.py; private/ is readable by its owner only."""
    import yaml

    (folder / "public").mkdir(parents=True)
    (folder / "private").mkdir(mode=0o700)
    (folder / "public" / "description.md").write_text(description + "\n")
    train.to_csv(folder / "public" / "train.csv", index=False)
    test.to_csv(folder / "public" / "test.csv", index=False)
    sample.to_csv(folder / "public" / "sample_submission.csv", index=False)
    answers.to_csv(folder / "private" / "answers.csv", index=False)
    (folder / "task.yaml").write_text(yaml.safe_dump({**fields, "data": "."}, sort_keys=False))
