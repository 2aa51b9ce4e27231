"""DVC set-up: the ledger's DVC repo and config, and the remote's object store (local storage without DVC).

Usage:
    init_dvc(root, storage_url)            # `woolf init`: .dvc/ with the remote named REMOTE_NAME
    remotes = DvcRemotes(root)             # (woolf/storage/dvcstore.py's DvcStore builds on it)
    odb = remotes._remote_odb()            # LocalObjects for a local directory, DVC's ODB otherwise
    ok, where = remotes.reachable()

DVC's repo is opened only when something needs it (a non-local remote, `dvc
add`/`push`); its config (system, global, repo, local, merged) is read without
opening the repo. A local-directory remote is reached directly in DVC's
layout, ``files/md5/<2>/<30>`` (woolf/storage/localobjects.py).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
from pathlib import Path

from woolf.errors import StorageError
from woolf.storage.localobjects import LocalObjects
from woolf.storage.verified import VerifiedHashes

os.environ.setdefault("DVC_NO_ANALYTICS", "1")
REMOTE_NAME = "storage"


@contextlib.contextmanager
def quiet():
    """DVC's library calls print hints meant for its CLI; keep them off our output."""
    from dvc.ui import ui  # deferred: dvc

    log = logging.getLogger("dvc")
    was, level = ui._enabled, log.level
    ui._enabled = False
    log.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        ui._enabled = was
        log.setLevel(level)


def upload_hint(exc: Exception) -> str:
    if "missing dependencies" in str(exc) and "s3" in str(exc):  # dvc-s3 is not installed
        return 'S3 storage needs the s3 extra: pip install -e ".[s3]" in your GoodWoolf checkout'
    return "is the storage reachable and writable?"


def init_dvc(root: Path, storage_url: str) -> None:
    from dvc.repo import Repo  # deferred: dvc

    with quiet():
        Repo.init(str(root))
    repo = Repo(str(root))
    try:
        with repo.config.edit() as conf:
            conf["remote"][REMOTE_NAME] = {"url": storage_url}
            conf["core"]["remote"] = REMOTE_NAME
            conf["core"]["analytics"] = False
            conf["core"]["autostage"] = False
            # copy: a workspace file is never the cache object, so no write can corrupt the cache
            conf["cache"]["type"] = "copy"
    finally:
        repo.close()


class DvcRemotes:
    """The DVC repo, its merged config and the remotes' object stores, opened lazily."""

    def __init__(self, root: Path):
        self.root = Path(root).resolve()
        self._repo = None
        self._config = None
        self.verified = VerifiedHashes(self.root / ".woolf" / "verified")

    def hashes(self, path: Path) -> tuple[str, str]:
        """(md5, sha256) of a cache object, hashed once while it stays unchanged."""
        return self.verified.hashes(path)

    @property
    def repo(self):
        if self._repo is None:
            from dvc.repo import Repo  # deferred: dvc

            self._repo = Repo(str(self.root))
        return self._repo

    def close(self) -> None:
        if self._repo is not None:
            self._repo.close()
            self._repo = None

    def cache_path(self, md5: str) -> Path:
        return self.root / ".dvc" / "cache" / "files" / "md5" / md5[:2] / md5[2:]

    @property
    def config(self):
        """DVC's merged config (system, global, repo, local), without opening the repo when it is closed."""
        if self._repo is not None:
            return self._repo.config
        if self._config is None:
            from dvc.config import Config  # deferred: dvc

            try:
                self._config = Config(dvc_dir=str(self.root / ".dvc"))
            except Exception as exc:  # DVC's config errors, all alike
                raise StorageError(f"DVC config is not usable: {exc}",
                                   hint="check `.dvc/config` and `.dvc/config.local`") from None
        return self._config

    def _remote_odb(self, name: str = REMOTE_NAME):
        """The remote's object store: a local directory is used directly (DVC's layout, no repo set-up)."""
        url = self.remote_url(name)
        if "://" not in url and os.path.isabs(url):
            return LocalObjects(Path(url) / "files" / "md5")
        return self._dvc_odb(name)

    def _dvc_odb(self, name: str = REMOTE_NAME):
        try:
            return self.repo.cloud.get_remote_odb(name)
        except Exception as exc:  # DVC raises many config/remote errors; report them all alike
            raise StorageError(f"DVC remote '{name}' is not usable: {exc}",
                               hint="check `.dvc/config` and credentials in `.dvc/config.local`") from None

    def remote_url(self, name: str = REMOTE_NAME) -> str:
        try:
            return self.config["remote"][name]["url"]
        except KeyError:
            raise StorageError(f"no DVC remote named '{name}'",
                               hint=f"add it: dvc remote add --local {name} URL") from None

    def reachable(self) -> tuple[bool, str]:
        try:
            odb = self._remote_odb()
            if not _probe(odb.fs).exists(odb.path):
                return False, f"{self.remote_url()} does not exist or holds no DVC objects"
            return True, self.remote_url()
        except Exception as exc:  # any transport or credential error means "unreachable"
            return False, str(exc)


def _probe(fs):
    """The remote's filesystem for a reachability probe. S3 without botocore's retries: with them,
    `woolf status` said UNREACHABLE after 7-8 s of backing off from a port nothing listens on; now in
    well under a second (one retry kept for a blip). Transfers keep DVC's own filesystem and retries."""
    args = getattr(fs, "fs_args", None)
    if getattr(fs, "protocol", None) != "s3" or not isinstance(args, dict):
        return fs
    from s3fs import S3FileSystem  # deferred: loads botocore (dvc-s3's)

    config = {**(args.get("config_kwargs") or {}), "retries": {"total_max_attempts": 2}}
    return S3FileSystem(**{**args, "config_kwargs": config, "skip_instance_cache": True})
