"""Regenerate the shipped example filings and their ground truth.

Run from anywhere (defaults are relative to the repository root)::

    python examples/generate.py                    # examples/filings/*.txt + examples/truth.json
    python examples/generate.py --count 5 --out /tmp/filings --truth /tmp/truth.json

Most filings are 20-80 KB; filings 5, 12 and 17 are large (320 KB, 450 KB, 700 KB) so the
chunker and the map/reduce path get exercised. Two more are written as EDGAR serves filings
(`pipeline_dev/synth_edgar.py`): an inline-XBRL HTML 10-K and a complete submission text file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import ModuleType

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO_ROOT / "examples" / "filings"
DEFAULT_TRUTH = REPO_ROOT / "examples" / "truth.json"
DEFAULT_COUNT = 20
DEFAULT_SEED = 7
SMALL_SIZES = (
    24_000, 52_000, 33_000, 71_000, 41_000, 28_000, 64_000, 45_000, 36_000,
    78_000, 22_000, 57_000, 30_000, 48_000, 67_000, 26_000, 39_000,
)  # fmt: skip
LARGE_SIZES = {5: 320_000, 12: 450_000, 17: 700_000}
EDGAR_EXAMPLES = (("htm", 90_000), ("submission", 60_000))
"""The EDGAR-dressed examples, after the plain-text ones: (kind, target size of their text)."""


def example_sizes(count: int) -> list[int]:
    """Target sizes in bytes for filings ``0..count-1``: large at fixed slots, else small."""
    sizes: list[int] = []
    small = 0
    for i in range(count):
        if i in LARGE_SIZES:
            sizes.append(LARGE_SIZES[i])
        else:
            sizes.append(SMALL_SIZES[small % len(SMALL_SIZES)])
            small += 1
    return sizes


def _synth() -> tuple[ModuleType, ModuleType]:
    """``pipeline_dev.synth_filings`` and ``synth_edgar``, from the installed project or else
    from this checkout."""
    try:
        from pipeline_dev import synth_edgar, synth_filings
    except ImportError:
        sys.modules.pop("pipeline", None)
        sys.path.insert(0, str(REPO_ROOT))
        from pipeline_dev import synth_edgar, synth_filings
    return synth_filings, synth_edgar


def main(argv: list[str] | None = None) -> int:
    """Write the example filings and truth file; returns a process exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="directory for the .txt filings")
    parser.add_argument("--truth", type=Path, default=DEFAULT_TRUTH, help="where to write truth.json")
    parser.add_argument("--count", type=int, default=DEFAULT_COUNT)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    args = parser.parse_args(argv)
    synth, edgar = _synth()
    truths = synth.write_filings(args.out, args.count, seed=args.seed, sizes=example_sizes(args.count))
    for offset, (kind, size) in enumerate(EDGAR_EXAMPLES):
        truths.append(
            edgar.write_example(args.out, args.count + offset, kind, seed=args.seed, target_bytes=size)
        )
    keep = {t.filename for t in truths}
    for stale in [
        *args.out.glob("*-10k.txt"),
        *args.out.glob("*-10k*.htm"),
        *args.out.glob("*-submission.txt"),
    ]:
        if stale.name not in keep:
            stale.unlink()
    args.truth.parent.mkdir(parents=True, exist_ok=True)
    args.truth.write_text(synth.truth_json(truths), encoding="utf-8", newline="\n")
    total = sum((args.out / name).stat().st_size for name in keep)
    print(f"wrote {len(truths)} filings ({total / 1e6:.2f} MB) to {args.out} and {args.truth}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
