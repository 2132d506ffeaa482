"""The run report: PNG figures of one run and an HTML page putting them together with its summary and config.

    python -m wmrl.report RUN_DIR_OR_MLFLOW_RUN_ID [--tracking-uri URI] [--out DIR]
"""
from __future__ import annotations

import html
import json
from pathlib import Path

from wmrl.report.data import RunData, load_run

__all__ = ["RunData", "load_run", "write_report"]


def write_report(run: RunData, out: Path | None = None, checkpoint: str | None = None) -> Path:
    """Writes <out>/{reward,cost,fidelity,divergence,anchors,programs,proxy}.png, summary.txt and index.html (default out:
    <run_dir>/report); returns the HTML page's path."""
    import matplotlib.pyplot as plt
    import yaml

    from wmrl import summary as summary_
    from wmrl.report.figures import FIGURES

    out = Path(out) if out is not None else (run.run_dir / "report" if run.run_dir else Path(f"report-{run.run_id}"))
    out.mkdir(parents=True, exist_ok=True)
    if checkpoint is None and run.run_dir is not None and (run.run_dir / "checkpoints" / "last.ckpt").exists():
        checkpoint = str(run.run_dir / "checkpoints" / "last.ckpt")
    s = summary_.summarize(run, checkpoint)
    text = summary_.render(s)
    (out / "summary.txt").write_text(text + "\n")
    (out / "summary.json").write_text(json.dumps(s, indent=1))
    images = []
    for name, make in FIGURES.items():
        fig = make(run)
        fig.savefig(out / f"{name}.png", dpi=110)
        plt.close(fig)
        images.append(name)
    body = "\n".join(f'<h2>{n}</h2><img src="{n}.png" alt="{n}">' for n in images)
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>wmrl run {html.escape(run.run_id)}</title>"
            "<style>body{font-family:sans-serif;max-width:1200px;margin:auto}img{max-width:100%}"
            "pre{background:#f4f4f4;padding:8px;overflow-x:auto}</style></head><body>"
            f"<h1>wmrl run {html.escape(str(s['preset']))} — {html.escape(run.run_id)}</h1>"
            f"<pre>{html.escape(text)}</pre>{body}"
            f"<h2>config</h2><pre>{html.escape(yaml.safe_dump(run.config, sort_keys=False))}</pre></body></html>")
    (out / "index.html").write_text(page)
    return out / "index.html"
