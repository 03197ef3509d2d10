"""Benchmarks for jobctl: the machine's limits, jobctl's workloads, and APScheduler 3 beside it.

Run from the repository root with ``python -m bench`` (``--quick`` for a smoke run,
``--help`` for the options). Only the standard library is used, plus APScheduler and
SQLAlchemy from the ``bench`` extra for the peer (``pip install -e '.[bench]'``).
"""
