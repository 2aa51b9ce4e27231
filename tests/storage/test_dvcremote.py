"""S3 storage through dvc-s3 against a real S3-protocol server (moto_server) on 127.0.0.1."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import SMALL, git
from woolf.ledger.create import CreateOptions
from woolf.protocol import layout
from woolf.storage.files import hashes_of_file

pytest.importorskip("dvc_s3")
boto3 = pytest.importorskip("boto3")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def s3_server(monkeypatch):
    port = _free_port()
    server = Path(sys.executable).with_name("moto_server")
    proc = subprocess.Popen([str(server), "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.2)
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": url}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    boto3.client("s3", endpoint_url=url).create_bucket(Bucket="woolf")
    yield url
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:  # a loaded machine: moto may not get to its signal handler in time
        proc.kill()
        proc.wait(10)


def test_s3_round_trip(s3_server, tmp_path):
    from woolf.ledger.ledger import Ledger

    work = Ledger.init(tmp_path / "work", CreateOptions(storage="s3://woolf/ledgers/demo", overrides=SMALL))
    keys = [o["Key"] for o in boto3.client("s3", endpoint_url=s3_server)
            .list_objects_v2(Bucket="woolf")["Contents"]]
    ptr = work.pointer(work.head().commit)
    assert f"ledgers/demo/files/md5/{ptr.md5[:2]}/{ptr.md5[2:]}" in keys
    git("clone", "-q", str(work.root), str(tmp_path / "clone"), cwd=tmp_path)
    clone = Ledger.open(tmp_path / "clone")
    assert clone.status().storage_reachable
    out = clone.checkout(0, tmp_path / "v0.safetensors")
    assert out.read_bytes() == (work.root / layout.WEIGHTS).read_bytes()
    assert hashes_of_file(out)[1] == clone.head().weights_sha256
    os.environ["AWS_ENDPOINT_URL"] = "http://127.0.0.1:9"  # nothing listens there
    assert Ledger.open(tmp_path / "clone").status().storage_reachable is False


def test_participant_cannot_delete_and_overwrites_keep_the_original(s3_server):
    """Append-only storage as docs/protocol.md describes it: a participant key without s3:DeleteObject,
    and a bucket with versioning and Object Lock, so an overwrite never loses the original bytes."""
    import json

    import requests
    from botocore.exceptions import ClientError

    iam = boto3.client("iam", endpoint_url=s3_server)
    admin = boto3.client("s3", endpoint_url=s3_server)
    admin.create_bucket(Bucket="ledger", ObjectLockEnabledForBucket=True)
    admin.put_object_lock_configuration(Bucket="ledger", ObjectLockConfiguration={
        "ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": {"Mode": "COMPLIANCE", "Days": 1}}})

    def client(name: str, actions: list[str]):
        iam.create_user(UserName=name)
        iam.put_user_policy(UserName=name, PolicyName="storage", PolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": actions,
                                                   "Resource": ["arn:aws:s3:::ledger", "arn:aws:s3:::ledger/*"]}]}))
        key = iam.create_access_key(UserName=name)["AccessKey"]
        return boto3.client("s3", endpoint_url=s3_server, aws_access_key_id=key["AccessKeyId"],
                            aws_secret_access_key=key["SecretAccessKey"])

    validator = client("validator", ["s3:*"])
    participant = client("participant", ["s3:GetObject", "s3:PutObject", "s3:ListBucket"])
    assert requests.post(f"{s3_server}/moto-api/reset-auth", data=b"0").ok  # policies are enforced from here
    key = "files/md5/ab/cdef"
    participant.put_object(Bucket="ledger", Key=key, Body=b"the delta")  # uploading is what a participant does
    with pytest.raises(ClientError, match="AccessDenied"):
        participant.delete_object(Bucket="ledger", Key=key)
    participant.put_object(Bucket="ledger", Key=key, Body=b"a forgery")  # an overwrite is a new version...
    versions = validator.list_object_versions(Bucket="ledger", Prefix=key)["Versions"]
    [original] = [v for v in versions if not v["IsLatest"]]
    assert len(versions) == 2  # ...and the original stays, readable by version, and locked even for the validator
    got = validator.get_object(Bucket="ledger", Key=key, VersionId=original["VersionId"])["Body"].read()
    assert got == b"the delta"
    with pytest.raises(ClientError):
        validator.delete_object(Bucket="ledger", Key=key, VersionId=original["VersionId"])
    # a write-once upload (conditional write) is refused outright where the key exists
    with pytest.raises(ClientError, match="PreconditionFailed"):
        participant.put_object(Bucket="ledger", Key=key, Body=b"again", IfNoneMatch="*")
