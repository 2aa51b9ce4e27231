"""woolf/demo/lora.py: what the demo's summary says of its PRs' kinds, and a --set delta.accept without lora."""

from __future__ import annotations

import pytest

from woolf.demo.lora import lora_facts, lora_settings
from woolf.errors import UsageError
from woolf.forges.base import PullRequest

pytestmark = pytest.mark.unit


def _pr(state, delta):
    return PullRequest(id=f"x-{state}", state=state, head="0" * 40, submission={"delta": delta})


def test_merged_prs_are_counted_by_kind_and_only_lora_factor_files_are_sized():
    prs = [_pr("merged", {"kind": "lora", "size": 30}), _pr("merged", {"kind": "dense", "size": 999}),
           _pr("rejected", {"kind": "lora", "size": 10}), _pr("merged", {"kind": "lora", "size": "big"}),
           _pr("merged", {"size": 5})]  # no kind declared: counted as dense
    assert lora_facts(prs) == {"merged_kinds": {"dense": 2, "lora": 2}, "lora_bytes": 20}
    assert lora_facts([_pr("merged", {"kind": "topk", "size": 5})]) == {"merged_kinds": {"topk": 1},
                                                                        "lora_bytes": None}


@pytest.mark.parametrize("accept", ['["dense", "lora"]', "['lora']", "lora", "[not toml"])
def test_a_set_delta_accept_that_lists_lora_or_is_no_list_passes_to_the_config_check(accept):
    assert lora_settings("r=4,alpha=8", {"delta.accept": accept}) == {"workload.params.lora": '"r=4,alpha=8"'}


@pytest.mark.parametrize("accept", ['["dense"]', '["dense", "topk", "loraX"]', "[]"])
def test_a_set_delta_accept_without_lora_is_refused(accept):
    with pytest.raises(UsageError, match="would refuse every LoRA PR"):
        lora_settings("r=4,alpha=8", {"delta.accept": accept})
