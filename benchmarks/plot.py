"""Re-draw the plots (and summary) of a benchmark run from its results.json.

    python -m benchmarks.plot benchmarks/results/h200/results.json [--out DIR]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .report import plot, summary


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", help="results.json written by benchmarks.run")
    p.add_argument("--out", default="", help="folder for the plots (default: next to results.json)")
    a = p.parse_args(argv)
    data = json.loads(Path(a.results).read_text())
    out = Path(a.out) if a.out else Path(a.results).parent
    for path in plot(data["rows"], out):
        print(path)
    (out / "summary.md").write_text(summary(data["rows"], data["environment"]))


if __name__ == "__main__":
    main()
