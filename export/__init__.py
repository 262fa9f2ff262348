"""bertonnx.export — torch -> ONNX: the export contract, fusion, quantization, parity, manifest."""
