"""The C library's release at run time and its versioned shared object (issue 39; docs/device.md, "The C client")."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from cms_core.version import __version__
from tests.test_versions import c_header_versions

from .c_client import C_DIR, make

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("cc") is None or shutil.which("readelf") is None,
                                 reason="no C compiler or readelf")]

PROGRAM = r"""
#include <stdio.h>
#include "ocms_client.h"
int main(void) { printf("%s %s\n", ocms_version(), OCMS_VERSION_STRING); return 0; }
"""


def test_the_shared_object_is_versioned_and_says_its_release(tmp_path):
    make("libocms_client.so")
    abi = c_header_versions()["OCMS_ABI_VERSION"]
    soname = f"libocms_client.so.{abi}"
    real = C_DIR / f"libocms_client.so.{__version__}"
    assert real.is_file() and not real.is_symlink()
    assert os.readlink(C_DIR / "libocms_client.so") == soname
    assert os.readlink(C_DIR / soname) == real.name
    dynamic = subprocess.run(["readelf", "-d", str(real)], capture_output=True, text=True, check=True).stdout
    assert f"Library soname: [{soname}]" in dynamic
    source = tmp_path / "version.c"
    source.write_text(PROGRAM)
    program = tmp_path / "version"
    subprocess.run(["cc", "-std=c99", f"-I{C_DIR / 'include'}", str(source), f"-L{C_DIR}", "-locms_client",
                    "-o", str(program)], check=True)
    needed = subprocess.run(["readelf", "-d", str(program)], capture_output=True, text=True, check=True).stdout
    assert f"Shared library: [{soname}]" in needed, "a program linked against the library asks for its soname"
    done = subprocess.run([str(program)], capture_output=True, text=True, check=True,
                          env={**os.environ, "LD_LIBRARY_PATH": str(C_DIR)})
    assert done.stdout == f"{__version__} {__version__}\n"
