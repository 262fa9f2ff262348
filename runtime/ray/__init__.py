"""bertonnx.runtime.ray — what Ray Serve (server/ray_serve.py) and Ray Data (bulk/ray_job.py)
share: connecting to a cluster (cluster.py)."""
