"""A package from ``mixzoo new-plugin`` (:func:`mixzoo.scaffold.new_plugin`), really installed: ``.ci/plugin-check``
run against a THROWAWAY virtual environment (``python -m venv --without-pip``, this environment's site-packages
added as site dirs by a ``.pth`` file for torch and the other dependencies, the package installed with ``pip
--python VENV install --no-deps --no-build-isolation -e``); this environment is never changed. The script
scaffolds the package, installs it, runs its tests, then ``mixzoo plugins``, ``mix`` (its model, clamp, optimizer
and method), ``bench --budget quick --n 8`` and ``sanity`` with its attack, and its command, as CI does after the
wheel check."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.timeout(1500)
def test_a_scaffolded_plugin_installs_and_runs_through_mix_bench_and_sanity(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # as site dirs, so that their own .pth files run too (an editable mixzoo is one)
    (Path(site) / "deps.pth").write_text("".join(f"import site; site.addsitedir({p!r})\n" for p in sys.path
                                                 if p.endswith("site-packages")))
    pip = f"{sys.executable} -m pip --python {python} install -q --no-deps --no-build-isolation -e"
    env = {**os.environ, "PLUGIN_CHECK_PIP": pip, "TMPDIR": str(tmp_path)}
    proc = subprocess.run([str(ROOT / ".ci" / "plugin-check"), str(python)], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=1400)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert "plugin check passed" in proc.stdout
