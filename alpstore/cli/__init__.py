"""The ``alpstore`` command line: thin Typer apps, one module per command group.

The top layer: may import any part of alpstore; nothing in alpstore imports it.
"""
