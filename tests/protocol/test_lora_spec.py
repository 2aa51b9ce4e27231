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
    ("r=4,alpha=-1", "use alpha >= 0"),
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
