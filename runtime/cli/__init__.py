"""bertonnx.runtime.cli — the `bertonnx` command (main.py) and the inference commands."""
from .main import COMMANDS, EXTRAS, Command, cli, main, missing_extra

__all__ = ["COMMANDS", "EXTRAS", "Command", "cli", "main", "missing_extra"]
