"""runtime/server/protocol.py's answer encoding: orjson's bytes read back as json.dumps' did."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np

from bertonnx.runtime.core.tensors import jsonable
from bertonnx.runtime.server.protocol import json_bytes


@dataclass
class Span:
    label: str
    score: float


def test_answers_read_back_as_json_dumps_wrote_them():
    rng = np.random.default_rng(0)
    # embeddings as the wires hand them over (float32 values as Python floats), at magnitudes
    # from 1e-30 to 1e30, with the edge values a vector can hold
    vectors = [(rng.standard_normal(384).astype(np.float32) * np.float32(10.0 ** k)).tolist()
               for k in range(-30, 31, 3)]
    vectors.append([0.0, -0.0, 1.0, -1.0, float(np.finfo(np.float32).tiny),
                    float(np.finfo(np.float32).max), 1e-5, 123456789.0])
    answer = {"data": [{"index": i, "embedding": v} for i, v in enumerate(vectors)],
              "model": "modèle ☃", "usage": {"prompt_tokens": 7},
              3: "an int key",                                  # json.dumps makes it "3"
              "native": [np.float32(0.1), np.arange(3), Span("POS", 0.25)]}
    got = json.loads(json_bytes(answer, jsonable))
    want = json.loads(json.dumps(answer, default=jsonable))
    assert got == want
    for g, w in zip(got["data"], want["data"]):  # == on floats, and the sign of every zero
        assert [math.copysign(1, x) for x in g["embedding"]] == \
            [math.copysign(1, x) for x in w["embedding"]]
    assert got["native"] == [float(np.float32(0.1)), [0, 1, 2], {"label": "POS", "score": 0.25}]
