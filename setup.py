"""Build the optional compiled decode kernel (cms_core._kernel), and ship the example registry.

Everything else is in pyproject.toml. The extension is optional: when it cannot
be compiled, cms_core falls back to its numpy implementation (slower, same
results), and ``cms_core.kernel.BACKEND`` says which one is active.

deploy/registry.yaml (with its lock, schema and tracked-value files) is the canonical example
registry of a checkout; a built package (wheel) carries a copy as ``ocms/example_registry/``, so
``ocms run`` installed from a wheel finds it too (``ocms.run_metric.DEFAULT_REGISTRY``).
"""

import shutil
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
#: The example registry's files, relative to deploy/ (tracked files are named relative to the registry).
EXAMPLE_REGISTRY_FILES = ("registry.yaml", "registry.lock", "registry.schema.json", "tracked/*.jsonl")
#: Where a built package holds them, relative to the package root.
EXAMPLE_REGISTRY_PACKAGE_DIR = Path("ocms") / "example_registry"


def example_registry_files() -> list[Path]:
    deploy = ROOT / "deploy"
    return sorted(path for pattern in EXAMPLE_REGISTRY_FILES for path in deploy.glob(pattern))


class BuildWithExampleRegistry(build_py):
    """build_py, plus deploy/'s example registry copied into the build as ocms/example_registry/
    (an editable install reads deploy/ itself)."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        files = example_registry_files()
        if ROOT / "deploy" / "registry.yaml" not in files:  # e.g. the Docker build context (no deploy/)
            self.warn("deploy/registry.yaml is not in the sources: the package is built without the example "
                      "registry (ocms run will say so)")
            return
        target = Path(self.build_lib) / EXAMPLE_REGISTRY_PACKAGE_DIR
        for path in files:
            destination = target / path.relative_to(ROOT / "deploy")
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, destination)


setup(
    cmdclass={"build_py": BuildWithExampleRegistry},
    ext_modules=[
        Extension(
            "cms_core._kernel",
            sources=["cms_core/_kernel.c"],
            extra_compile_args=["-O3", "-std=c11", "-fno-strict-aliasing"],
            optional=True,
        ),
        Extension(
            "collector.exactly_once._keytable",
            sources=["collector/exactly_once/_keytable.c"],
            extra_compile_args=["-O2", "-std=c11"],
            optional=True,
        ),
    ],
)
