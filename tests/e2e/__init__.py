"""End-to-end tests: several real processes, the demo, the benchmarks, a GitHub API server; marked `e2e`
(tests/conftest.py), so `pytest -m "not e2e"` leaves them out while developing. The whole suite runs them."""
