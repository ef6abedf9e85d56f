"""`make bench`: the benchmarks, each a module run as `python -m bench.<name>`; they print
figures and assert nothing (tests/test_bench.py runs each on a small input)."""
