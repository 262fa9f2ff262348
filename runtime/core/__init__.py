"""bertonnx.runtime.core — the torch-free core everything else stands on.

The export contract and the task and family tables, the tokenizer, onnxruntime sessions, the
pipelines, errors and the atomic-folder helper. It imports numpy, onnxruntime and tokenizers
only: none of click, starlette, uvicorn, ray, pyarrow, prometheus_client, tqdm, torch or
transformers (tests/runtime/core/test_layering.py holds it to that). build and export import it and
nothing else of the runtime; the applications (cli, server, bulk, ray, triton) sit above it.
"""
