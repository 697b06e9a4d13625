"""Test harnesses that ship with alpstore: the kill -9 torture engine and its child workload.

Library code used by ``tests/reliability/`` and ``scripts/torture``; nothing here runs in normal
operation.
"""
