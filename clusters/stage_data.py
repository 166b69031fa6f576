"""Stage the data root onto a node and check it before any trial starts there.

    python clusters/stage_data.py manifest DIR        # once, where the data was prepared: writes DIR/MANIFEST.sha256
    python clusters/stage_data.py pull SRC DEST       # on every node: copy SRC (s3://..., gs://..., or a path) to DEST
    python clusters/stage_data.py verify DIR          # on every node: DIR exists; if it has a manifest,
                                                        every file matches

Copies go through pyarrow.fs (pinned in lock/requirements.lock), so object storage needs no extra CLI on the node
and uses the instance's IAM role. A manifest turns a half-finished sync into a failed node setup instead of
a trial that dies hours later. No torch, no ray: this runs before the environment is known to work.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

MANIFEST = "MANIFEST.sha256"


def sha256_of(path: Path) -> str:
    """Hex sha256 of one file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(root: Path) -> int:
    """Write root/MANIFEST.sha256 (sha256sum format) over every file below root; returns the file count."""
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.name != MANIFEST)
    lines = [f"{sha256_of(p)}  {p.relative_to(root).as_posix()}\n" for p in files]
    (root / MANIFEST).write_text("".join(lines))
    return len(files)


def verify(root: Path) -> list[str]:
    """Problems with the data root: missing, not a folder, or files that differ from its manifest."""
    if not root.is_dir():
        return [f"data root {root} does not exist on this node"]
    manifest = root / MANIFEST
    if not manifest.is_file():
        return []
    problems = []
    for line in manifest.read_text().splitlines():
        expected, _, rel = line.partition("  ")
        path = root / rel
        if not path.is_file():
            problems.append(f"{rel}: listed in {MANIFEST} but missing")
        elif sha256_of(path) != expected:
            problems.append(f"{rel}: sha256 differs from {MANIFEST}")
    return problems


def pull(src: str, dest: Path) -> None:
    """Copy the tree at src (a URI pyarrow.fs understands, or a local path) into dest."""
    from pyarrow import fs

    dest.mkdir(parents=True, exist_ok=True)
    if "://" not in src:
        src = Path(src).resolve().as_uri()
    fs.copy_files(src, dest.resolve().as_uri(), use_threads=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("manifest").add_argument("root", type=Path)
    pull_p = sub.add_parser("pull")
    pull_p.add_argument("src")
    pull_p.add_argument("dest", type=Path)
    sub.add_parser("verify").add_argument("root", type=Path)
    args = parser.parse_args(argv)
    if args.cmd == "manifest":
        print(f"{write_manifest(args.root)} files listed in {args.root / MANIFEST}")
        return 0
    if args.cmd == "pull":
        pull(args.src, args.dest)
        args.root = args.dest
    problems = verify(args.root)
    for problem in problems:
        print(f"data: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
