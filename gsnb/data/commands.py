"""``gsnb fetch NAME``: a sample capture into the user's cache (see :mod:`gsnb.data.download`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gsnb.data import download
from gsnb.data.samples import SAMPLES


def fetch_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``gsnb fetch``.

    Example:
        >>> p = argparse.ArgumentParser()
        >>> fetch_arguments(p)
        >>> a = p.parse_args(["fox", "--from", "fox.zip"])
        >>> a.name, a.source
        ('fox', 'fox.zip')
    """
    listing = "; ".join(
        f"{s.name}: {s.description} ({s.size / 2**20:.0f} MiB)" for s in SAMPLES.values()
    )
    parser.description = f"Fetch a sample capture, checked file by file. Samples: {listing}."
    parser.add_argument("name", choices=sorted(SAMPLES), help="which sample")
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="where to keep it (default: $GSNB_DATA_DIR/NAME or ~/.cache/gsnb/data/NAME)",
    )
    parser.add_argument(
        "--from",
        dest="source",
        metavar="PATH",
        default=None,
        help="a folder or .zip/.tar archive that already holds the sample: no download "
        "(default: $GSNB_FETCH_FROM when set)",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def fetch(args: argparse.Namespace) -> int:
    """``gsnb fetch``: print the sample's folder; exit 1 with the cause when it fails."""
    sample = SAMPLES[args.name]
    folder = args.dir if args.dir is not None else download.data_dir() / args.name
    print(f"gsnb fetch: {sample.name} ({sample.size / 2**20:.0f} MiB) into {folder}")
    print(f"  license: {sample.license}")
    try:
        path = download.fetch(
            args.name, folder=folder, source=args.source, progress=not args.no_progress
        )
    except (download.FetchError, OSError) as err:
        print(f"gsnb fetch: error: {err}", file=sys.stderr)
        return 1
    print(path)
    return 0
