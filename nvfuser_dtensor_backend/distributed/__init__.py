"""The distributed pipeline: DTensor programs as nvFuser multidevice fusions.

- ``global_view``: graphs with DTensor inputs traced with global shapes, the training
  autograd.Function, the compile-time dry run on fake DTensors;
- ``tp_conversions``: parallelize_module's from_local / redistribute / to_local, rewritten;
- ``dtensor_region``: a fusion region on DTensors (global shapes, annotations, placements);
- ``dtensor``: placements <-> nvFuser device meshes and shardings;
- ``dtensor_ops``: DTensor sharding strategies for ops the lowering leaves (CPU SDPA).

The single-device pipeline (backend, partition, fusion, region, translators) does not import
this package except through ``backend.py``'s entry for graphs with DTensor inputs.
"""
