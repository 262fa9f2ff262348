"""The bench tests' shared tiny classifier: its checkpoint and its fused fp32 export (with
parity), built once per module from the session's tiny models."""
from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def cls_checkpoint(tiny_checkpoint) -> Path:
    return tiny_checkpoint("text-classification")


@pytest.fixture(scope="module")
def cls_export(tiny_export) -> Path:
    return tiny_export("text-classification", parity=True)
