"""Ledger core against real git and DVC: init, hub, clone, pull, checkout, status, bad input."""

from __future__ import annotations

import json
import shutil

import pytest
from safetensors.torch import save_file

from tests.conftest import SMALL, git
from woolf.cli.main import main
from woolf.errors import (
    IntegrityError,
    NotALedgerError,
    StorageError,
    UnknownVersionError,
    UsageError,
)
from woolf.ledger.create import CreateOptions
from woolf.ledger.ledger import Ledger
from woolf.protocol import layout
from woolf.storage.files import hashes_of_file


def cli(capsys, *args):
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_init_hub_clone_pull_checkout_identical(network, tmp_path):
    a = network.clone("a")
    b = network.clone("b")
    head = b.pull()
    assert head.version == 0
    assert (b.root / layout.WEIGHTS).exists()
    xa, xb = a.checkout(0, tmp_path / "xa"), b.checkout(0, tmp_path / "xb")
    assert xa.read_bytes() == xb.read_bytes() == (network.work.root / layout.WEIGHTS).read_bytes()
    assert hashes_of_file(xa)[1] == a.head().weights_sha256


def test_version_zero_commit(network):
    v = network.work.head()
    assert v.version == 0 and v.base_version is None
    assert set(v.metrics) == {"loss", "bpb"} and v.metrics["loss"] > 0  # genesis records its loss
    files = network.work.git.ls_tree(v.commit)
    assert {layout.CONFIG, layout.POINTER, ".dvc/config", ".gitignore"} <= set(files)
    assert layout.WEIGHTS not in files  # weights live in DVC storage, not git


def test_log_show_status_json(network, capsys):
    d = str(network.work.root)
    code, out, _ = cli(capsys, "-C", d, "log", "--json")
    assert code == 0
    entry = json.loads(out)[0]
    for key in ("version", "commit", "base_version", "staleness", "attenuation", "contributor",
                "submission", "metrics"):
        assert key in entry
    assert entry["metrics"]["loss"] > 0 and entry["version"] == 0  # genesis records its loss
    code, out, _ = cli(capsys, "-C", d, "show", "0", "--json")
    assert code == 0 and json.loads(out)["weights_size"] > 0
    code, out, _ = cli(capsys, "-C", d, "status", "--json")
    st = json.loads(out)
    assert st["weights_match"] is True and st["storage_reachable"] is True


def test_init_refuses_existing_ledger_and_nonempty_dir(network, tmp_path, capsys):
    with pytest.raises(UsageError, match="already holds a ledger"):
        Ledger.init(network.work.root)
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "f").write_text("x")
    code, _, err = cli(capsys, "init", "--unsigned", str(tmp_path / "junk"))
    assert code == 2 and "not empty" in err
    assert (tmp_path / "junk" / "f").read_text() == "x"


def test_init_from_weights_file(tmp_path, network):
    ckpt = tmp_path / "pre.safetensors"
    shutil.copy(network.work.root / layout.WEIGHTS, ckpt)
    settings = {k: v for k, v in SMALL.items()}
    led = Ledger.init(tmp_path / "pre", CreateOptions(storage=str(tmp_path / "s2"), weights=ckpt, overrides=settings))
    assert (led.root / layout.WEIGHTS).read_bytes() == ckpt.read_bytes()
    other = tmp_path / "other.safetensors"
    import torch

    save_file({"x": torch.zeros(3)}, other)
    with pytest.raises(Exception, match="not the ledger's model"):
        Ledger.init(tmp_path / "pre2", CreateOptions(storage=str(tmp_path / "s3"), weights=other, overrides=settings))
    assert not (tmp_path / "pre2").exists()


def test_not_a_repo_and_not_a_ledger(tmp_path, capsys):
    code, _, err = cli(capsys, "-C", str(tmp_path), "log")
    assert code == 2 and "not inside a git repository" in err
    git("init", "-q", "-b", "main", cwd=tmp_path)
    with pytest.raises(NotALedgerError, match="not a ledger"):
        Ledger.open(tmp_path)


def test_unknown_version(network, capsys):
    with pytest.raises(UnknownVersionError, match="versions 0..0"):
        network.work.show(5)
    code, _, err = cli(capsys, "-C", str(network.work.root), "checkout", "7")
    assert code == 2 and "does not exist" in err


def test_corrupted_storage_object_is_detected(network, tmp_path):
    c = network.clone("c")
    ptr = c.pointer(c.head().commit)
    obj = tmp_path / "storage" / "files" / "md5" / ptr.md5[:2] / ptr.md5[2:]
    obj.chmod(0o644)
    data = bytearray(obj.read_bytes())
    data[-1] ^= 0xFF
    obj.write_bytes(bytes(data))
    out = tmp_path / "out.safetensors"
    with pytest.raises(IntegrityError, match="does not match its hash"):
        c.checkout(0, out)
    assert not out.exists()


def test_tampered_cache_object_is_detected(network, tmp_path):
    led = network.work
    ptr = led.pointer(led.head().commit)
    obj = led.store.cache_path(ptr.md5)
    obj.chmod(0o644)
    data = bytearray(obj.read_bytes())
    data[100] ^= 0x01
    obj.write_bytes(bytes(data))
    with pytest.raises(IntegrityError):
        led.checkout(0, tmp_path / "o")
    assert led.checkout(0, tmp_path / "o").exists()  # bad cache copy dropped; storage copy is good


def test_storage_unreachable(network, tmp_path, capsys):
    c = network.clone("c")
    shutil.move(tmp_path / "storage", tmp_path / "storage-moved")
    st = c.status()
    assert st.storage_reachable is False
    with pytest.raises(StorageError, match="missing from storage"):
        c.checkout(0, tmp_path / "o")
    code, _, err = cli(capsys, "-C", str(c.root), "pull")
    assert code == 4 and "storage" in err
    assert not (tmp_path / "o").exists()


def test_bad_config_on_main_reports_file_and_field(network, capsys):
    led = network.work
    text = (led.root / layout.CONFIG).read_text().replace("[limits]", "[limits]\nsurprise = 1")
    (led.root / layout.CONFIG).write_text(text)
    git("commit", "-qam", "edit", cwd=led.root)
    code, _, err = cli(capsys, "-C", str(led.root), "status")
    assert code == 3 and "ledger/woolf.toml" in err and "limits.surprise" in err


def test_cache_type_is_copy(network):
    assert "type = copy" in (network.work.root / ".dvc" / "config").read_text()
