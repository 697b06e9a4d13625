"""The read-only web inspector (``alpstore ui``): Starlette routes, pages, queries, templates.

May import the store facade and everything below it; never the command line.
"""
