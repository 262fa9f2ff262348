"""`python -m bertonnx.runtime.cli ...` is the `bertonnx` command."""
import sys

from .main import main

sys.exit(main())
