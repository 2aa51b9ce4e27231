"""Tests of woolf/ledger/: the Ledger, retention, tasks, the hidden benchmark, generated workflows."""
