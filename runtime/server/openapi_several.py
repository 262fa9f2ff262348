"""The OpenAPI document of a server of several models (GET /openapi.json when it serves more
than one; `?model=NAME` is one model's own document, openapi.py's): each model's document
merged into one, each route once.

A route's request body is any one model's body (`anyOf` where the models' differ), an object
body gaining `model` (an enum of the names: which model answers); a path's model name takes any
model's that answers the route; /info takes `?model=`; and the routes that pick a model
document the 404 and 422 picking may answer (registry.Registry.pick).
"""
from __future__ import annotations

# several models served: what picking the request's model answers (registry.Registry.pick)
PICKING = {404: "A `model` no model here is called, or no model of the route's task.",
           422: "No `model`, and several models answer the route: the message names them."}


def several(docs: list[dict], names: list[str]) -> dict:
    """The documents of several models as one: each route once, its body any one model's
    (with `model` naming which, where the body is an object), a path's model name any
    model's that answers it; GET /openapi.json?model=NAME is one model's own."""
    out = {**docs[0], "paths": {}}
    out["info"] = {**out["info"], "title": f"bertonnx serve: {', '.join(names)}",
                   "description": f"Models served by bertonnx: {', '.join(names)}. A request "
                                  "names its model in `model` (the v2 protocol: in its path); "
                                  "left out, the one model that answers the route does."}
    model = {"type": "string", "enum": names, "description": "Which model answers (left "
             "out: the one model of the route's task; 422 naming them when several are)."}
    bodies: dict[tuple[str, str], list[dict]] = {}   # each route's distinct bodies
    for doc in docs:
        for path, ops in doc["paths"].items():
            for method, op in ops.items():
                body = op.get("requestBody", {}).get("content", {}).get("application/json")
                if body is not None:
                    schema = body["schema"]
                    if "properties" in schema and "model" not in schema["properties"]:
                        schema = {**schema, "properties": {**schema["properties"],
                                                           "model": model}}
                    known = bodies.setdefault((path, method), [])
                    if schema not in known:
                        known.append(schema)
                seen = out["paths"].setdefault(path, {}).get(method)
                if seen is None:
                    out["paths"][path][method] = op
                    continue
                for param, other in zip(seen.get("parameters", []), op.get("parameters", [])):
                    param["schema"]["enum"] = list(dict.fromkeys(
                        param["schema"]["enum"] + other["schema"]["enum"]))
                seen["responses"] = {**op["responses"], **seen["responses"]}
    for (path, method), schemas in bodies.items():
        body = out["paths"][path][method]["requestBody"]["content"]["application/json"]
        body["schema"] = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
    info = out["paths"].get("/info", {}).get("get")
    if info is not None:
        info["parameters"] = [{"name": "model", "in": "query", "required": False,
                               "schema": model}]
    for path, ops in out["paths"].items():   # what picking a model may answer
        for op in ops.values():
            if "requestBody" in op or op is info:
                content = next((r["content"] for status, r in op["responses"].items()
                                if status.startswith("4") and "content" in r), None)
                for status, why in PICKING.items():
                    op["responses"].setdefault(str(status), {
                        "description": why, **({"content": content} if content else {})})
    return out
