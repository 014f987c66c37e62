"""Package discovery that pyproject.toml cannot express on its own (everything else is in pyproject.toml).

Every package under ``mixzoo/`` is found, so a new subpackage ships without editing a list; the built-in plugins'
directory ``plugins/`` installs as the package ``mixzoo_plugins`` (``package-dir`` in pyproject.toml), with its
subpackages, if any. Data files (``mixzoo/registry.toml``, the zoo's weights) are ``package-data`` in pyproject.toml.
"""

from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["mixzoo", "mixzoo.*"]),
                "mixzoo_plugins", *(f"mixzoo_plugins.{p}" for p in find_packages("plugins"))])
