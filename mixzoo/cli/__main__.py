"""``python -m mixzoo.cli``: the ``mixzoo`` command."""

from mixzoo.cli import main

main()
