"""Real tables (CSV or Parquet) as task data: a DataFrame of features with their own names and dtypes.

Categorical and text columns and empty cells are kept as they are: preprocessing is the
program's job. Every error names the file and the column, so a user can fix their data.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional, Tuple

import numpy as np

from wmrl.config import TaskConfig
from wmrl.domains.research.tasks.spec import TaskError

if TYPE_CHECKING:
    import pandas as pd

TABLE_SUFFIXES = (".csv", ".parquet", ".pq")
DEFAULT_MAX_MB = TaskConfig.max_data_mb  # for callers without a config (the schema holds the default)


def is_table(path: str) -> bool:
    return Path(path).suffix.lower() in TABLE_SUFFIXES


def check_size(path: Path, max_mb: float, where: str) -> None:
    """The file is at most `max_mb` on disk and, for Parquet, once decompressed (a small file can declare
    gigabytes of column data: it is refused before anything is read)."""
    size_mb = path.stat().st_size / 2**20
    if size_mb > max_mb:
        raise TaskError(f"{where}: file {str(path)!r} is {size_mb:.0f} MiB, over task.max_data_mb={max_mb:g}")
    if path.suffix.lower() in (".parquet", ".pq"):
        raw_mb = parquet_metadata(path, where).get("raw_bytes", 0) / 2**20
        if raw_mb > max_mb:
            raise TaskError(f"{where}: file {str(path)!r} decompresses to {raw_mb:.0f} MiB, over task.max_data_mb={max_mb:g}")


def parquet_metadata(path: Path, where: str) -> dict:
    """Column names and the uncompressed size a Parquet file's footer declares, or a TaskError."""
    import pyarrow.parquet as pq

    try:
        meta = pq.ParquetFile(path).metadata
        raw = 0
        for i in range(meta.num_row_groups):  # encoded sizes understate run-length data: fixed widths count too
            group = meta.row_group(i)
            for j in range(meta.num_columns):
                width = _WIDTH.get(meta.schema.column(j).physical_type) or meta.schema.column(j).length or 0
                raw += max(group.column(j).total_uncompressed_size, group.num_rows * width)
        return {"names": list(meta.schema.to_arrow_schema().names), "raw_bytes": raw}
    except Exception as e:  # noqa: BLE001 - pyarrow's errors are many; its message says what is wrong
        raise TaskError(f"{where}: cannot read {Path(path).name} as Parquet: {type(e).__name__}: {str(e)[:300]}") from None


_WIDTH = {"BOOLEAN": 1, "INT32": 4, "INT64": 8, "INT96": 12, "FLOAT": 4, "DOUBLE": 8}  # bytes per value, decoded


def _read_parquet(path: Path, max_mb: float) -> "pd.DataFrame":
    """Read in batches, stopping once the decoded data passes `max_mb` (a footer can understate it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    batches, decoded = [], 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=65_536):
        decoded += batch.nbytes
        if decoded > max_mb * 2**20:
            raise TaskError(f"file {str(path)!r} decompresses to more than task.max_data_mb={max_mb:g} MiB")
        batches.append(batch)
    return pa.Table.from_batches(batches, schema=pq.read_schema(path)).to_pandas()


def read_table(path: Path, where: str, max_mb: float = DEFAULT_MAX_MB) -> "pd.DataFrame":
    """A CSV (empty cells become missing values) or Parquet file as a DataFrame."""
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise TaskError(f"{where}: data file {str(path)!r} does not exist")
    check_size(path, max_mb, where)
    try:
        if path.suffix.lower() == ".csv":
            df = pd.read_csv(path)
        else:
            df = _read_parquet(path, max_mb)
    except TaskError as e:
        raise TaskError(f"{where}: {e}") from None
    except Exception as e:  # a parser's own message says which line is wrong
        raise TaskError(f"{where}: cannot read {path.name}: {type(e).__name__}: {e}") from None
    df.columns = [str(c) for c in df.columns]
    if df.columns.duplicated().any():
        raise TaskError(f"{where}: {path.name} has duplicate column names {sorted(set(df.columns[df.columns.duplicated()]))}")
    return df


def features_and_target(df: "pd.DataFrame", file: str, where: str, target: str, kind: str,
                        id_column: Optional[str] = None) -> Tuple["pd.DataFrame", np.ndarray]:
    """(features, raw target) of a labelled table; rows without a target are dropped.

    The id column is not a feature: row ids carry no signal a model should learn from.
    """
    if target not in df.columns:
        raise TaskError(f"{where}: target column {target!r} is not in {file} (columns: {', '.join(df.columns)})")
    if id_column is not None and id_column not in df.columns:
        raise TaskError(f"{where}: id column {id_column!r} is not in {file} (columns: {', '.join(df.columns)})")
    df = df[df[target].notna()].reset_index(drop=True)
    if len(df) == 0:
        raise TaskError(f"{where}: target column {target!r} of {file} has no values")
    y = df[target].to_numpy()
    if kind == "regression":
        try:
            y = y.astype(np.float64)
        except (TypeError, ValueError):
            raise TaskError(f"{where}: target column {target!r} of {file} is not numeric (kind is regression)") from None
    else:
        y = y.astype(str) if y.dtype.kind == "O" else y
        if len(np.unique(y)) < 2:
            raise TaskError(f"{where}: target column {target!r} of {file} has one class only ({y[0]!r}); "
                            f"nothing to classify")
    X = df.drop(columns=[c for c in (target, id_column) if c is not None])
    if X.shape[1] == 0:
        raise TaskError(f"{where}: {file} has no feature columns besides {target!r}")
    return X, y


def class_codes(y_train: np.ndarray, *others: np.ndarray, where: str, column: str) -> Tuple[np.ndarray, list]:
    """Class labels as codes 0..k-1 (sorted labels), for train and the other parts; the label list."""
    classes = np.unique(np.concatenate([np.asarray(y_train), *[np.asarray(o) for o in others]]))
    unseen = np.setdiff1d(classes, np.unique(y_train))
    if len(unseen):
        raise TaskError(f"{where}: target column {column!r} has classes never in the training rows: {unseen[:5].tolist()}")
    return classes, [c.item() if isinstance(c, np.generic) else c for c in classes]


def frame_digest(h, df: "pd.DataFrame") -> None:
    """Feed a DataFrame (names, dtypes, values incl. missing) into a hashlib object."""
    import pandas as pd

    h.update(repr([(c, str(t)) for c, t in df.dtypes.items()]).encode())
    h.update(pd.util.hash_pandas_object(df, index=False).to_numpy().tobytes())


def summary(X: "pd.DataFrame", limit: int = 12) -> str:
    """Columns as `name:dtype` with the share missing, for prompts: what a program can rely on."""
    parts = []
    for c in X.columns[:limit]:
        miss = X[c].isna().mean()
        parts.append(f"{c}:{_dtype_word(X[c])}" + (f"({miss:.0%} missing)" if miss > 0 else ""))
    more = f", ... {X.shape[1] - limit} more" if X.shape[1] > limit else ""
    return ", ".join(parts) + more


def _dtype_word(col: "pd.Series") -> str:
    import pandas as pd

    if pd.api.types.is_bool_dtype(col):
        return "bool"
    if pd.api.types.is_numeric_dtype(col):
        return "int" if pd.api.types.is_integer_dtype(col) else "float"
    if isinstance(col.dtype, pd.CategoricalDtype):
        return "category"
    return "text"


def is_numeric_only(X) -> bool:
    """True for arrays and for frames of numeric, complete columns: no preprocessing needed."""
    import pandas as pd

    if not isinstance(X, pd.DataFrame):
        return True
    return all(pd.api.types.is_numeric_dtype(X[c]) and not pd.api.types.is_bool_dtype(X[c]) for c in X.columns) \
        and not X.isna().to_numpy().any()
