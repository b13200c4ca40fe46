#!/usr/bin/env python3
"""Write tests/golden/RELEASE/: one sample of every stored format as this code writes it, and its manifest.

    .venv/bin/python scripts/write_golden.py 0.2.0

    .venv/bin/python scripts/write_golden.py unreleased --force

Run once per release, for the release being made (RELEASE must be cms_core.version.__version__): an
earlier release's directory is never written again, it is what the current code must still read
(tests/golden/test_golden.py, pytest -m upgrade; docs/compatibility.md). ``unreleased`` is what this code
writes beyond its release (a format changed since: CHANGELOG.md, Unreleased); written again at each such
change, and renamed to the next release's version when it is made.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cms_core.version import __version__  # noqa: E402
from tests.golden.formats import UNRELEASED, write_release  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("release", help=f"the release being made (this code is {__version__})")
    parser.add_argument("--force", action="store_true", help="write it again although it exists (before the tag only)")
    args = parser.parse_args(argv)
    if args.release not in (__version__, UNRELEASED):
        parser.error(f"this code is release {__version__}, not {args.release}: an earlier release's samples are "
                     "never rewritten")
    directory = ROOT / "tests" / "golden" / args.release
    if directory.exists() and not args.force:
        parser.error(f"{directory.relative_to(ROOT)} exists (--force writes it again, before the release is tagged)")
    manifest = write_release(directory, args.release)
    print(f"wrote {len(manifest['samples'])} samples and manifest.json to {directory.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
