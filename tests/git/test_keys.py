"""SSH signing keys (woolf/git/keys.py): a public key where the private one belongs is one clear line."""

from __future__ import annotations

from tests.conftest import key_for


def test_a_public_key_in_woolf_signing_key_is_one_line_not_an_ssh_keygen_wall(network, cli):
    val = network.clone("val", key="nobody")  # no key configured: WOOLF_SIGNING_KEY is the one
    public = f"{key_for('val')}.pub"
    for command in (["validate"], ["config", "set", "policy.min_improvement=-1"]):
        r = cli(*command, cwd=val.root, env={"WOOLF_SIGNING_KEY": public})
        assert r.returncode == 2, r.stderr
        assert r.stderr.splitlines()[0] == (f"error: WOOLF_SIGNING_KEY={public} is a public key; point "
                                            "WOOLF_SIGNING_KEY at the private key"), r.stderr
        assert f"hint: WOOLF_SIGNING_KEY={key_for('val')}" in r.stderr and "ssh-keygen" not in r.stderr
