"""Test harnesses that ship with alpstore: the kill -9 torture engine and its child workload.
An adapter beside the UI: may import the store, the integrations and everything below them.

Library code used by ``tests/reliability/`` and ``scripts/torture``; nothing here runs in normal
operation.
"""
