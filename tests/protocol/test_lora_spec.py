"""`--lora` text (woolf/protocol/lora_spec.py): what it means, and a one-line refusal for each bad input."""

from __future__ import annotations

import pytest

from woolf.protocol.lora_spec import LoraSpec, parse_lora

pytestmark = pytest.mark.unit


def test_parse_and_text_round_trip():
    spec = parse_lora("r=16,alpha=32,targets=q_proj+v_proj,dropout=0.05,dtype=bf16,ckpt=0")
    assert spec == LoraSpec(16, 32.0, ("q_proj", "v_proj"), 0.05, "bf16", False)
    assert spec.text().endswith(",ckpt=0")
    assert parse_lora("r=4").checkpointing and parse_lora("r=4,ckpt=1") == parse_lora("r=4")  # on by default
    assert parse_lora(spec.text()) == spec and spec.scale == 2.0
    assert parse_lora("r=4").scale == 2.0 and parse_lora("r=4").text() == "r=4,alpha=8"
    for off in ("", "off", "none", "OFF"):
        assert parse_lora(off) is None


def test_the_scale_the_rate_and_carrying_are_explicit():
    spec = parse_lora("r=4")
    assert spec.alpha == 8.0 and spec.scale == 2.0  # alpha left out: 2r, written down
    assert parse_lora("r=4,lr_scale=auto").lr_scale is None and "lr_scale=auto" in parse_lora("r=4,lr_scale=auto").text()
    full = spec.text(full=True)  # what a recipe records: every field, defaults spelled out
    assert parse_lora(full) == spec and "lr_scale=" in full and "carry=" in full and "ckpt=1" in full
    carried = parse_lora("r=4,carry=1,lr_scale=2")
    assert carried.carry and carried.lr_scale == 2.0 and parse_lora(carried.text()) == carried


def test_a_quantized_base_round_trips():
    spec = parse_lora("r=16,base=nf4")
    assert spec.base == "nf4" and spec.text() == "r=16,alpha=32,base=nf4" and parse_lora(spec.text()).base == "nf4"
    assert parse_lora("r=16").base == ""


@pytest.mark.parametrize("text,msg", [
    ("alpha=8", "the rank r is required"),
    ("r=4,r=5", "expected r=R"),
    ("r=4,rank=2", "expected r=R"),
    ("r", "expected r=R"),
    ("r=x", "is not a number"),
    ("r=0", "use a rank in"),
    ("r=4,alpha=-1", "use alpha > 0"),
    ("r=4,alpha=0", "alpha=0: use alpha > 0 with alpha/r <= 1024 (leave it out for 2r)"),
    ("r=4,lr_scale=0", "lr_scale=0: use a positive number"),
    ("r=4,lr_scale=-3", "lr_scale=-3: use a positive number"),
    ("r=4,lr_scale=ten", "lr_scale='ten' is not a number"),
    ("r=4,lr_scale=inf", "is not finite"),
    ("r=4,carry=yes", "carry='yes': use 0 or 1"),
    ("r=1,alpha=5000", "alpha/r <= 1024"),
    ("r=4,dropout=1", "probability in [0, 1)"),
    ("r=4,alpha=nan", "is not finite"),
    ("r=4,targets=q_proj+a/b", "is not a module name"),
    ("r=4,dtype=fp8", "use one of auto, bf16, fp32"),
    ("r=4,ckpt=yes", "use 0 or 1"),
    ("r=4,base=nf8", "use base=nf4"),
])
def test_bad_text_is_one_line(text, msg):
    with pytest.raises(ValueError) as err:
        parse_lora(text)
    assert msg in str(err.value) and "\n" not in str(err.value)
