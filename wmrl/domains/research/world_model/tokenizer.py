"""The world model's tokenizer: BPE over code-ish pieces, trained offline on a generated seed corpus.

Pre-tokenization splits identifiers, punctuation and every single digit, so any hyperparameter
value is representable digit by digit and estimator class names (all of them are in the seed
corpus) become single tokens. Bytes are the initial alphabet, so no input is ever unknown.
"""
from __future__ import annotations

import random
from functools import lru_cache
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

TOKENIZER_PATH = Path(__file__).resolve().parent / "tokenizer.json"
VOCAB_SIZE = 2048
PAD, UNK, SEP = "<pad>", "<unk>", "<sep>"
SPECIALS = [PAD, UNK, SEP]


def _pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\s+"), behavior="removed"),  # layout carries no outcome signal once ast.parse passed
        pre_tokenizers.Split(Regex(r"[A-Za-z_]+|[^A-Za-z_0-9]"), behavior="isolated"),
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])


def seed_corpus(n_programs: int = 3000, seed: int = 0) -> list[str]:
    """Plausible sklearn programs, task descriptors and observations, generated without any data."""
    from sklearn.utils import all_estimators

    rng = random.Random(seed)
    estimators = [(name, cls.__module__.split("._")[0]) for name, cls in all_estimators()]
    params = ["n_estimators", "max_depth", "C", "alpha", "gamma", "kernel", "learning_rate", "max_iter",
              "n_neighbors", "min_samples_leaf", "min_samples_split", "max_features", "random_state",
              "n_jobs", "solver", "penalty", "l1_ratio", "tol", "subsample", "criterion", "weights",
              "hidden_layer_sizes", "activation", "degree", "n_components", "strategy", "class_weight",
              "max_leaf_nodes", "epsilon", "fit_intercept", "loss", "bootstrap", "early_stopping"]
    values = ["100", "200", "500", "0.1", "0.01", "1.0", "10", "3", "5", "None", "'rbf'", "'linear'",
              "'auto'", "'sqrt'", "True", "False", "42", "0", "-1", "'balanced'", "(64, 32)", "'l2'"]
    steps = [("StandardScaler", "sklearn.preprocessing"), ("MinMaxScaler", "sklearn.preprocessing"),
             ("PCA", "sklearn.decomposition"), ("SimpleImputer", "sklearn.impute"),
             ("PolynomialFeatures", "sklearn.preprocessing"), ("SelectKBest", "sklearn.feature_selection")]
    texts = []
    for _ in range(n_programs):
        name, module = rng.choice(estimators)
        kw = ", ".join(f"{p}={rng.choice(values)}" for p in rng.sample(params, rng.randint(0, 3)))
        pre = rng.sample(steps, rng.randint(0, 2))
        imports = [f"from {module} import {name}"] + [f"from {m} import {s}" for s, m in pre]
        body = f"{name}({kw})"
        if pre:
            imports.append("from sklearn.pipeline import make_pipeline")
            body = "make_pipeline(" + ", ".join(f"{s}()" for s, _ in pre) + f", {body})"
        extra = rng.choice(["", "    import numpy as np\n", "    # baseline\n",
                            "    raise ValueError('not implemented')\n"])
        texts.append("\n".join(imports) + f"\n\n\ndef build():\n{extra}    return {body}\n")
    kinds = [("classification", "accuracy"), ("classification", "f1_macro"), ("regression", "r2"),
             ("regression", "neg_rmse"), ("classification", "roc_auc")]
    statuses = ["malformed", "syntax_error", "runtime_error", "timeout", "no_valid_output", "valid"]
    for i in range(600):
        kind, metric = rng.choice(kinds)
        texts.append(f"task=task{i % 50} kind={kind} n={rng.randint(50, 5000)} d={rng.randint(2, 300)} "
                     f"classes={rng.randint(2, 10)} metric={metric}")
        texts.append(f"[execution of turn {rng.randint(1, 5)}] status: {rng.choice(statuses)}; {metric} = "
                     f"{rng.random():.4f}; leaderboard position = {rng.random():.2f}; error: ValueError: "
                     "Unknown label type: continuous. Input contains NaN, infinity or a value too large")
    return texts


def build_tokenizer(vocab_size: int = VOCAB_SIZE, seed: int = 0) -> Tokenizer:
    """Train the BPE tokenizer on the seed corpus (deterministic given the corpus)."""
    tok = Tokenizer(models.BPE(unk_token=UNK))
    tok.pre_tokenizer = _pre_tokenizer()
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(seed_corpus(seed=seed), trainer=trainer)
    return tok


@lru_cache(maxsize=1)
def _shipped_json() -> str:
    if not TOKENIZER_PATH.exists():  # first use in a fresh checkout without the shipped file
        build_tokenizer().save(str(TOKENIZER_PATH))
    return TOKENIZER_PATH.read_text()


def load_tokenizer(json_str: str | None = None) -> Tokenizer:
    """The shipped tokenizer, or one serialised with a saved world model."""
    return Tokenizer.from_str(json_str if json_str is not None else _shipped_json())


DELIMITERS = frozenset("(),:;[]{}")
CHUNK_TOKENS = 16  # keep equal to model.CHUNK_TOKENS


def chunk(encoding, text: str, on_space: bool = False) -> list[list[int]]:
    """Split an encoding into short chunks of ids: after a delimiter, at a line break (or any
    whitespace with `on_space`), and every CHUNK_TOKENS tokens; `n_estimators=200,` is one chunk."""
    out: list[list[int]] = []
    cur: list[int] = []
    prev_end = None
    for tid, tok, (a, b) in zip(encoding.ids, encoding.tokens, encoding.offsets):
        if cur and prev_end is not None:
            gap = text[prev_end:a]
            if "\n" in gap or (on_space and gap) or len(cur) >= CHUNK_TOKENS:
                out.append(cur)
                cur = []
        cur.append(tid)
        if tok in DELIMITERS:
            out.append(cur)
            cur = []
        prev_end = b
    if cur:
        out.append(cur)
    return out


if __name__ == "__main__":  # python -m wmrl.domains.research.world_model.tokenizer  rebuilds the shipped file
    build_tokenizer().save(str(TOKENIZER_PATH))
    print(f"wrote {TOKENIZER_PATH}")
