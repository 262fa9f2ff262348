"""The models one server serves: a registry of name -> export folder, pipeline, batcher (one
`Model` each), and the rule that picks the model a request is for (`Registry.pick`).

A route's handler never reads a module-level model: it asks the registry with the name the
request gives (OpenAI's and Cohere's `model`, the v2 path's name, the optional `model` of the
TEI-shaped and /predict bodies) and the tasks that serve the route (its `Endpoint.tasks`):

    entry = registry.pick(requested, tasks, path, unknown)

A named model is that one (`unknown(name, names)` is the route's own 404 for another name: its
wire's `unknown_model`); no name: the one model whose task serves the route — none is a 404
naming the loaded models, several a 422 naming the choices. With one model served, an unnamed request always gets it
(the route then answers exactly as it did before the registry: its own 404 for another task).
A `Model` carries what a wire reads (`pipeline`, `name`, `options`, `allowed`), so the wires,
the OpenAPI schemas and /info work on one entry as they did on the one model.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..core.errors import BertOnnxError
from .batching import DynamicBatcher
from .metrics import Metrics
from .protocol import PipelineRunner, allowed_parameters
from .settings import ServeOptions
from .wire import FieldError, served

log = logging.getLogger("bertonnx.serve")


@dataclass(frozen=True)
class ModelSource:
    """One export to serve: its name on the protocols, its folder, and (tests, embedders) a
    loader returning its pipeline instead of `bertonnx.runtime.load(folder)`."""

    name: str
    folder: Path
    loader: Callable[[], Any] | None = None


@dataclass
class Model:
    """One export served: what the wires read (pipeline, name, options, allowed) and its own
    batcher and metrics."""

    name: str
    model_dir: Path
    options: ServeOptions
    metrics: Metrics
    loader: Callable[[], Any] | None = None
    pipeline: Any = None
    allowed: frozenset[str] | None = None
    batcher: DynamicBatcher | None = None
    load_error: str | None = None
    several: bool = False   # served beside other models: a refusal names the one asked for

    @property
    def ready(self) -> bool:
        return self.batcher is not None

    @property
    def task(self) -> str | None:
        return self.pipeline.task if self.pipeline is not None else None

    def load(self):
        # onnxruntime comes with the model, in the loading thread: /health answers meanwhile
        from ..core.pipelines import load as load_pipeline

        if self.loader is not None:
            return self.loader()
        # One server batch = one micro-batch of the pipeline (it splits longer lists); each
        # of --workers' calls at once on its own share of the threads (an engine stream)
        return load_pipeline(self.model_dir, providers=self.options.providers,
                             threads=self.options.threads,
                             batch_size=self.options.batch.max_batch_size,
                             streams=self.options.batch.workers)

    async def start(self, arriving, shared: asyncio.Semaphore | None) -> bool:
        """Load the pipeline (in a thread) and start its batcher; False (load_error set) if
        loading failed."""
        try:
            pipe = await asyncio.get_running_loop().run_in_executor(None, self.load)
        except BertOnnxError as e:
            log.error("cannot load %s: %s", self.model_dir, e)
            self.load_error = str(e)
            return False
        except Exception as e:  # noqa: BLE001 — reported, then the server stops
            log.exception("cannot load %s", self.model_dir)
            # a library error's line names its fix; this one gets the general one
            self.load_error = (f"{type(e).__name__}: {e} — check the export folder with "
                               "`bertonnx parity`, or export again")
            return False
        self.pipeline = pipe
        self.allowed = allowed_parameters(pipe)
        batcher = DynamicBatcher(PipelineRunner(pipe), self.options.batch,
                                 on_batch=self.metrics.batch_done, arriving=arriving,
                                 shared=shared)
        batcher.start()
        self.batcher = batcher
        log.info("model ready: %s as %s (%s)", self.model_dir, self.name, pipe.task)
        return True


@dataclass
class Registry:
    """The models served, by name, in the order given."""

    models: dict[str, Model] = field(default_factory=dict)

    def __iter__(self):
        return iter(self.models.values())

    def __len__(self) -> int:
        return len(self.models)

    @property
    def names(self) -> list[str]:
        return list(self.models)

    @property
    def first(self) -> Model:
        return next(iter(self.models.values()))

    @property
    def ready(self) -> bool:
        return all(m.ready for m in self)

    @property
    def load_error(self) -> str | None:
        """The first model's failure to load; named when several are served."""
        failed = [m for m in self if m.load_error is not None]
        if not failed:
            return None
        return failed[0].load_error if len(self) == 1 else "; ".join(
            f"{m.name}: {m.load_error}" for m in failed)

    def get(self, name) -> Model | None:
        return self.models.get(name) if isinstance(name, str) else None

    def pick(self, requested, tasks: tuple[str, ...] | None, path: str,
             unknown: Callable[[Any, list[str]], Exception]) -> Model:
        """The model a request is for (the module docstring's rule); `requested` is the name
        the request gives (None: none), `tasks` the tasks that serve the route at `path`."""
        if requested == "":
            requested = None   # as good as none (OpenAI's client sends "" when not told)
        if len(self) == 1 and (requested is None or not isinstance(requested, str)):
            return self.first   # the route judges the request as it always has
        if requested is not None:
            if not isinstance(requested, str):
                raise FieldError(422, f"model must be a string, one of {served(self.names)}",
                                 "model", "InvalidRequest")
            if requested not in self.models:
                raise unknown(requested, self.names)
            return self.models[requested]
        serving = [m for m in self if tasks is None or m.task in tasks]
        if len(serving) == 1:
            return serving[0]
        if not serving:
            loaded = ", ".join(f"{m.name!r} ({m.task})" for m in self)
            raise FieldError(404, f"no model here answers {path}: it needs a "
                                  f"{' or '.join(tasks or ())} export, and this server serves "
                                  f"{loaded}", "model", "NotServed")
        raise FieldError(422, f"several models here answer {path}: name one in `model`, one of "
                              f"{served(m.name for m in serving)}", "model", "ModelRequired")
