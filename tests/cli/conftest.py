"""The CLI tests use the runtime tests' tiny exports (built once per session)."""
from tests.runtime.conftest import export_of, ours  # noqa: F401  (pytest fixtures)
