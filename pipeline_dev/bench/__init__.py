"""Benchmarks: this pipeline against the naive asyncio baseline it replaces."""
