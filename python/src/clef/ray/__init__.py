"""clef on a Ray cluster (the optional extra: pip install './python[ray]'; docs/deploy.md).

- clef.ray.batch: `python -m clef.ray batch IN OUT --model DIR`, clef batch's bytes and resume rules
  with one engine per node (Ray actors), lines grouped by routing key.
- clef.ray.serve: a Ray Serve application answering POST /v1/systemone like `clef serve`, replicas
  holding one engine each, requests routed by the routing key (X-Clef-State-Key).

Nothing here is imported by `import clef`; Ray is needed only for these modules.
"""
