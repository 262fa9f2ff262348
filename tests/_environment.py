"""The suite's independence from the caller's environment (issue 43): the variables that change
what the code under test does are unset for the session, and the tests that need one set or
unset set it themselves (tests/conftest.py registers these fixtures)."""
from __future__ import annotations

import pytest

# The caller's environment variables that change what the code under test does, unset for the
# session (its servers and CLIs included; module-scoped servers start before a test's own
# fixtures): a test that needs one sets it itself, with monkeypatch.
CALLER_VARIABLES = (
    # httpx and requests send even a loopback request through a proxy the environment names
    "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy",
    # `bertonnx serve` reads its API keys from it: every request would be refused 401
    "BERTONNX_API_KEY",
    # test hooks of bulk jobs (runtime/bulk/job.py, ray_job.py): a stray one kills a job
    "BERTONNX_BULK_CRASH_AFTER", "BERTONNX_RAY_PAUSE_AFTER",
    # a launcher's (torchrun, SLURM) rank variables make training start a process group
    "WORLD_SIZE", "RANK", "LOCAL_RANK",
)


@pytest.fixture(scope="session", autouse=True)
def _caller_environment():
    with pytest.MonkeyPatch.context() as mp:
        for name in CALLER_VARIABLES:
            mp.delenv(name, raising=False)
        yield


@pytest.fixture
def hf_hub_online(monkeypatch):
    """huggingface_hub answering a URL (a local server's) with HF_HUB_OFFLINE=1 or
    TRANSFORMERS_OFFLINE=1 in the caller's environment, as air-gapped machines and CI images
    often have it: huggingface_hub reads it once, at import, and then refuses every request."""
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    hub = pytest.importorskip("huggingface_hub")
    monkeypatch.setattr(hub.constants, "HF_HUB_OFFLINE", False)
    return hub
