"""The simulated fleet and the offline tools: datasets, the simulator, discovery simulation, offline estimates, plan.

Behind ``ocms simulate``, ``ocms estimate`` and ``ocms plan``, and the fleet of ``ocms run``. Imports cms_core,
infra, registry and the device clients (producer/, whose transports a simulated device uses); the collector
and the worker never import it (docs/layout.md).
"""
