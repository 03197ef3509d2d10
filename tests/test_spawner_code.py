"""The native spawn's machine code is its source, assembled (jobctl.spawner)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from jobctl.spawner import NATIVE_SPAWN, NATIVE_SPAWN_SOURCE


@pytest.mark.skipif(NATIVE_SPAWN is None, reason="no native spawn for this machine")
@pytest.mark.skipif(
    not (shutil.which("as") and shutil.which("objcopy")), reason="binutils are not installed"
)
def test_the_native_spawn_is_its_source_assembled(tmp_path):
    source = tmp_path / "spawn.s"
    source.write_text(NATIVE_SPAWN_SOURCE)
    subprocess.run(["as", str(source), "-o", str(tmp_path / "spawn.o")], check=True)
    subprocess.run(
        ["objcopy", "-O", "binary", "-j", ".text", str(tmp_path / "spawn.o"), str(tmp_path / "x")],
        check=True,
    )
    assert (tmp_path / "x").read_bytes() == NATIVE_SPAWN
