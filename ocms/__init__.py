"""The composition root: the ``ocms`` command, ``ocms run`` and the child processes it supervises.

The only package that imports every other one (cms_core, infra, registry, producer, fleet, collector,
agents): ``ocms run`` starts a broker, a worker, a collector and a simulated fleet and prints what the
worker answers (docs/layout.md).
"""
