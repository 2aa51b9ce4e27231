"""Data regimes of the built-in text workloads: each participant its own part of the corpus.

Usage:
    files = domain_files(index=0, n=3)                  # participant 1 of 3's part of the pool
    shard = domain_shard("p1", index=0, n=3, base_version=4, k=8)

`charlm`'s ``domains`` param (a list of contributor names) gives the i-th name
of n the pool files whose path hash falls in bucket i of n: n disjoint parts
of the corpus, each participant's data its own (the regime a real ledger
trains in), while the benchmark still spans every part. A participant's shard
is a pure function of (contributor, its part, base version), as the default
shards are (corpus.py). Contributors not named sample the whole pool.
"""

from __future__ import annotations

import functools
import hashlib
import random

from woolf.errors import ConfigError
from woolf.workloads import corpus


@functools.lru_cache(maxsize=64)
def domain_files(index: int, n: int) -> tuple[str, ...]:
    """Pool files in part ``index`` of ``n`` (the hash bucket benchmarks/convergence.py's domains use)."""
    return tuple(f for f in corpus.pool_files() if hashlib.sha256(f.encode()).digest()[1] % n == index)


def domain_shard(contributor: str, index: int, n: int, base_version: int, k: int) -> list[str]:
    files = domain_files(index, n)
    seed = hashlib.sha256(f"woolf-domain:{contributor}:{index}/{n}:{base_version}".encode()).digest()
    return sorted(random.Random(seed).sample(files, min(k, len(files))))


def check_domains(domains) -> list[str]:
    """``workload.params.domains``: distinct contributor names (it comes from a ledger's config)."""
    if not isinstance(domains, (list, tuple)) or not all(isinstance(d, str) and d for d in domains):
        raise ConfigError("ledger/woolf.toml: workload.params.domains must be a list of contributor names",
                          hint='e.g. domains = ["p1", "p2", "p3"], or leave it out for shared shards')
    if len(set(domains)) != len(domains):
        raise ConfigError("ledger/woolf.toml: workload.params.domains names a contributor twice",
                          hint="name each contributor once; its position is its part of the corpus")
    if len(domains) > 64:
        raise ConfigError(f"ledger/woolf.toml: workload.params.domains names {len(domains)} contributors; "
                          "at most 64 parts of the corpus", hint="list at most 64 names")
    return list(domains)
