"""Build the optional compiled decode kernel (cms_core._kernel).

Everything else is in pyproject.toml. The extension is optional: when it cannot
be compiled, cms_core falls back to its numpy implementation (slower, same
results), and ``cms_core.kernel.BACKEND`` says which one is active.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "cms_core._kernel",
            sources=["cms_core/_kernel.c"],
            extra_compile_args=["-O3", "-std=c11", "-fno-strict-aliasing"],
            optional=True,
        )
    ]
)
