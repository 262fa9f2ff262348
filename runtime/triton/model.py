"""The Triton Python-backend model of any bertonnx export (TritonPythonModel).

Not imported by bertonnx: `bertonnx export-triton --backend python` copies this file unchanged
to REPO/NAME/1/model.py, beside the export (1/export), and Triton's Python stub runs it with
bertonnx installed in the stub's Python. Nothing in it is about one model or task: the export's
manifest names the task and bertonnx.runtime.triton.stub answers from the pipeline. Reference:
triton-inference-server/python_backend README (TritonPythonModel, InferenceResponse, TritonError).
"""
import json

import triton_python_backend_utils as pb_utils

from bertonnx.runtime.triton.stub import PipelineModel, Request, options_of


class TritonPythonModel:
    def initialize(self, args):
        self.model = PipelineModel(*options_of(args))
        self.inputs = [t.name for t in self.model.spec.inputs]

    def execute(self, requests):
        plain = []
        for request in requests:
            tensors = {}
            for name in self.inputs:
                tensor = pb_utils.get_input_tensor_by_name(request, name)
                if tensor is not None:
                    tensors[name] = tensor.as_numpy()
            plain.append(Request(tensors, json.loads(request.parameters() or "{}")))
        try:
            outcomes = self.model.run(plain)
        except Exception as e:  # a fault of ours, not of one request: every request says so
            outcomes = [RuntimeError(f"{type(e).__name__}: {e}")] * len(requests)
        responses = []
        for outcome in outcomes:
            if isinstance(outcome, Exception):
                code = (pb_utils.TritonError.INVALID_ARG if not isinstance(outcome, RuntimeError)
                        else pb_utils.TritonError.INTERNAL)
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(str(outcome), code)))
            else:
                responses.append(pb_utils.InferenceResponse(
                    [pb_utils.Tensor(name, array) for name, array in outcome.items()]))
        return responses
