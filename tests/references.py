"""The multi-vector references (PyPI `pylate`, `FlagEmbedding`) in a small environment of their
own, for the multi-vector tests.

pylate 1.6 pins sentence-transformers 5.3 (its ColBERT reads and saves through 5.3's internals:
under the suite's 5.7 it cannot load a folder), and a resolver would also swap the suite's torch
and transformers (its fast-plaid pins a CUDA torch). So the references get a venv of their own,
$BERTONNX_TEST_CACHE (default ~/.cache/bertonnx-tests)/references, holding only what differs —
sentence-transformers 5.3, pylate, FlagEmbedding and the few pure-Python packages their import
paths need, all --no-deps — and reading everything else (torch, transformers, bertonnx, tests)
from the suite's own environment (a .pth line that adds its site-packages after its own). Made
once in setup, in seconds on a warm pip cache:

    python -m tests.references

The tests run the references there in a subprocess (tests/colbert_reference.py,
st6_reference.py, bge_m3_reference.py) that builds tiny random folders with them and writes
their outputs: `Environment.write` runs one, and the test skips, saying why, where the
environment is not made.

sentence-transformers 6's MultiVectorEncoder cannot share that venv (pylate needs 5.3), so it has
a second one made the same way, references-st6 (`ST6`: sentence-transformers 6.2 alone, --no-deps;
it declares transformers>=5 but runs on the suite's 4.57, as tests/st6_reference.py shows);
`python -m tests.references` makes both.
"""
from __future__ import annotations

import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import pytest

from bertonnx.bench.references import SUITE_SITE, cache, env  # noqa: F401 (env: the tests')

REPO = Path(__file__).resolve().parents[1]
# Exact versions: the references' behaviour is what the tests compare against
PACKAGES = ("sentence-transformers==5.3.0", "pylate==1.6.0", "FlagEmbedding==1.4.2",
            # their import paths: datasets (pylate.utils, FlagEmbedding.abc), peft (FlagEmbedding)
            "datasets==4.4.2", "peft==0.21.2", "ujson", "dill", "multiprocess", "xxhash")
# the stamp written last; a new name remakes an environment made by an older recipe
MADE = ".made-2"
# each reference's import, checked once made
IMPORTS = "import pylate.models, pylate.rank; from FlagEmbedding import BGEM3FlagModel"


@dataclass(frozen=True)
class Environment:
    """A references' venv: its folder name in the cache, its packages (--no-deps, over the
    suite's), the import that proves it made, and the stamp written last."""

    name: str
    packages: tuple[str, ...]
    imports: str
    made: str

    def root(self) -> Path:
        return cache() / self.name

    def python(self) -> Path | None:
        """The interpreter, when made (its stamp written last)."""
        python = self.root() / "bin" / "python"
        return python if python.is_file() and (self.root() / self.made).is_file() else None

    def write(self, module: str, out: Path) -> Path:
        """`out`, where `python -m module out` in this environment wrote the reference's
        folders and outputs; the test skips when the environment is not made, and fails with
        the reference's own error."""
        python = self.python()
        if python is None:
            pytest.skip(f"the {self.name} environment is not made (python -m tests.references)")
        done = subprocess.run([str(python), "-m", module, str(out)], cwd=REPO,
                              capture_output=True, text=True, env=env())
        if done.returncode:
            pytest.fail(f"{module} failed:\n{done.stderr[-3000:]}")
        return out

    def prepare(self) -> Path:
        """The venv, made when missing (idempotent); returns its interpreter."""
        if (done := self.python()) is not None:
            return done
        venv = self.root()
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--clear", str(venv)],
                       check=True)
        python = venv / "bin" / "python"
        purelib = subprocess.run([str(python), "-c", "import sysconfig; "
                                  "print(sysconfig.get_paths()['purelib'])"], check=True,
                                 capture_output=True, text=True).stdout.strip()
        # the suite's site-packages after the references' own (addsitedir also reads its .pth
        # files: bertonnx's editable install)
        ours = sysconfig.get_paths()["purelib"]
        # ... the caller's, named by SUITE_SITE (`env()`): several checkouts (CI clones,
        # worktrees) share this cache, and each must run the references against its own bertonnx
        Path(purelib, "zz-bertonnx-suite.pth").write_text(
            f"import os, site; site.addsitedir(os.environ.get({SUITE_SITE!r}) or {ours!r})\n",
            encoding="utf-8")
        subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                        "--quiet", "--no-deps", *self.packages], check=True)
        subprocess.run([str(python), "-c", self.imports], check=True, env=env())
        (venv / self.made).touch()
        return python


REFERENCES = Environment("references", PACKAGES, IMPORTS, MADE)
# sentence-transformers 6.2 (MultiVectorEncoder); its other imports are the suite's packages
ST6 = Environment("references-st6", ("sentence-transformers==6.2.0",),
                  "from sentence_transformers import MultiVectorEncoder", ".made-1")


if __name__ == "__main__":
    for made in (REFERENCES, ST6):
        print(made.prepare())
