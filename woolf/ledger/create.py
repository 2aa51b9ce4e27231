"""Create a new ledger: git repository, DVC, config, benchmark, CI files, version 0.

Usage:
    create_ledger(Path("my-ledger"), CreateOptions(storage="s3://bucket/prefix",
                  overrides={"policy.min_improvement": "-0.05"}))
    create_ledger(Path("my-ledger"), CreateOptions(workload="transformers", weights=Path("my-model")))
    create_ledger(Path("my-ledger"), CreateOptions(signing_key=Path("~/.ssh/woolf"), signer="alice",
                  extra_signers=['v2 namespaces="git" ssh-ed25519 AAAA... roles=validator']))

It takes one CreateOptions (None: its defaults), as Ledger.init does.

With a signing key the creator is listed in ledger/allowed_signers as maintainer
and validator, version 0 is signed with that key, and the new repository is
configured to sign with it (gpg.format = ssh, user.signingkey). Without one the
ledger is unsigned (docs/protocol.md#signatures).
"""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from woolf._version import __version__
from woolf.errors import ConfigError, UsageError
from woolf.forges.install_source import check_source, pinned_source
from woolf.git.keys import configure, public_of
from woolf.git.repo import Git
from woolf.protocol import layout
from woolf.protocol.config import LedgerConfig
from woolf.protocol.config_text import apply_overrides, render_config
from woolf.protocol.contributor import contributor_id
from woolf.protocol.layout import CONTRIBUTOR
from woolf.protocol.signers import SIGNERS_PATH, Signers, signer_line
from woolf.protocol.trailers import format_message
from woolf.storage.dvcstore import DvcStore, init_dvc
from woolf.storage.files import hashes_of_file, make_dir
from woolf.storage.kinds import LORA


def write_ci_files(root: Path, woolf_source: str | None = None) -> None:
    """The GitHub validator workflow and the ci/ scripts it calls (see docs/github.md); ci/install.sh
    installs GoodWoolf from ``woolf_source`` (forges/install_source.py), or from what this
    installation came from."""
    source = pinned_source(woolf_source) or ""
    templates = files("woolf") / "templates"
    targets = {"woolf-validate.yml": ".github/workflows/woolf-validate.yml", "evaluate.sh": "ci/evaluate.sh",
               "merge.sh": "ci/merge.sh", "install.sh": "ci/install.sh",
               "woolf-sweep.yml": ".github/workflows/woolf-sweep.yml", "sweep.sh": "ci/sweep.sh"}
    for name, rel in targets.items():
        out = root / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text((templates / name).read_text().replace("__WOOLF_VERSION__", __version__)
                       .replace("__WOOLF_SOURCE__", source))
        if rel.endswith(".sh"):
            out.chmod(0o755)


def _signers(signing_key: Path | None, signer: str | None, extra: list[str] | tuple[str, ...]) -> str | None:
    """The allowed_signers text: the creator as maintainer and validator, then ``extra`` lines."""
    if signing_key is None:
        if extra:
            raise UsageError("extra signers need a signing key for the creator", hint="pass --key")
        return None

    if not Path(signing_key).exists():
        raise UsageError(f"signing key {signing_key} does not exist", hint="make one with `woolf key create`")
    public = public_of(Path(signing_key))
    comment = public.split()[2] if len(public.split()) > 2 else ""
    name = contributor_id(signer or (comment if CONTRIBUTOR.match(comment) else None))
    lines = [signer_line(name, public, ["maintainer", "validator"]), *extra]
    return Signers.parse("\n".join(lines), "--signer").render()  # validates every line


def delta_bytes_needed(weights: dict) -> int:
    """The smallest `limits.max_delta_bytes` that admits a dense delta (or trained file) of this model:
    its tensors' bytes plus 1 MiB of header, rounded up to a MiB (the 2 GiB default refuses a
    2B-parameter float32 model's; an explicit `--set limits.max_delta_bytes` is kept as given)."""
    data = sum(t.numel() * t.element_size() if hasattr(t, "element_size") else t.nbytes for t in weights.values())
    return -(-(data + (1 << 20)) // (1 << 20)) * (1 << 20)


def _pretrained_defaults(cfg, wl, overrides: dict) -> bool:
    """A genesis from --weights is a trained model: the workload's settings for continuing one
    (charlm: optimizer_warmup 60, the demo's; without it the first train regressed),
    unless --set names them. Whether any was set."""
    added = {k: v for k, v in getattr(wl, "PRETRAINED_DEFAULTS", {}).items()
             if f"workload.params.{k}" not in overrides and k not in cfg.workload.params}
    cfg.workload.params.update(added)
    return bool(added)


MAX_BENCHMARK = 64 << 20  # a benchmark lives in git and is read whole by every evaluation


def _benchmark_text(path: Path) -> bytes:
    """`woolf init --benchmark FILE`: the file's bytes, refused in one line when they cannot be a text
    benchmark (unreadable, empty, over MAX_BENCHMARK, or not UTF-8 text)."""
    try:
        size = Path(path).stat().st_size
        if size > MAX_BENCHMARK:
            raise UsageError(f"--benchmark {path}: {size} bytes, over {MAX_BENCHMARK >> 20} MiB",
                             hint="a benchmark is committed to git and evaluated whole: use a sample of it")
        data = Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"--benchmark {path}: cannot read it ({exc.strerror})") from None
    if not data.strip():
        raise UsageError(f"--benchmark {path}: the file is empty", hint="give the text the gate should score")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"--benchmark {path}: not UTF-8 text (byte {exc.start})",
                         hint="a benchmark is the text a model is scored on") from None
    return data


@dataclass(frozen=True)
class CreateOptions:
    """What the new ledger is; each field is the keyword `create_ledger` takes, same default."""

    storage: str | None = None  # the DVC remote URL or directory; None: PATH.storage beside PATH
    workload: str = "charlm"  # a built-in name or an installed entry point (workloads/base.py)
    alpha: float | None = None  # merge.alpha_base, the scale of every merged delta
    weights: Path | None = None  # start from this checkpoint (transformers: a model directory)
    name: str | None = None  # the ledger's name; None: the directory's
    seed: int = 0  # the seed of genesis weights (without ``weights``)
    overrides: dict[str, str] | None = None  # config keys -> values, as `woolf init --set`
    signing_key: Path | None = None  # the creator's SSH key (maintainer, validator); None: unsigned
    signer: str | None = None  # the creator's name in allowed_signers; None: the key's comment
    extra_signers: list[str] | tuple[str, ...] = ()  # more allowed_signers lines
    woolf_source: str | None = None  # where ci/install.sh installs GoodWoolf from; None: detected
    benchmark: Path | None = None  # the public benchmark's text (the gate's, unless a hidden one is set);
    # None: the workload's own (the built-ins: held-out Python standard library sources)


def _check_target(path: Path) -> None:
    """A ledger is made in a new or empty directory: UsageError otherwise."""
    if (path / layout.CONFIG).exists():
        raise UsageError(f"{path} already holds a ledger", hint="use `woolf status` there")
    if path.exists() and not path.is_dir():
        raise UsageError(f"{path} exists and is a file, not a directory", hint="choose a new or empty directory")
    if path.exists() and any(path.iterdir()):
        raise UsageError(f"{path} exists and is not empty", hint="choose a new or empty directory")


def _new_config(path: Path, o: CreateOptions) -> LedgerConfig:
    """The new ledger's config from the options, validated; a typo in --workload is the option's."""
    from woolf.workloads.base import check_workload_name  # deferred: loads torch

    if "workload.name" not in (o.overrides or {}):
        try:
            check_workload_name(o.workload, "--workload")
        except ConfigError as exc:
            raise UsageError(exc.message, hint=exc.hint) from None
    cfg = LedgerConfig(name=o.name or path.name)
    cfg.workload.name = o.workload
    if o.alpha is not None:
        cfg.merge.alpha_base = o.alpha
    return apply_overrides(cfg, o.overrides or {})


def _workload_for_init(cfg, o: CreateOptions):
    """The new ledger's workload; a param it refuses is the option's (`--set workload.params.lr=abc`), not
    a config file's the user has not seen yet (the error said "ledger/woolf.toml: ...")."""
    from woolf.workloads.base import load_workload  # deferred: loads torch

    try:
        return load_workload(cfg.workload)
    except ConfigError as exc:
        text = exc.message.removeprefix("ledger/woolf.toml: ")
        raise UsageError(f"--set {text}" if text.startswith("workload.params") else text, hint=exc.hint) from None


def create_ledger(path: Path, options: CreateOptions | None = None) -> None:
    """Refuses a path that holds a ledger or anything else; removes what it made if it fails."""
    from woolf.storage.weights import (  # deferred: loads numpy
        compare_spec,
        load_checked,
        read_spec,
        save_atomic,
        spec_of,
    )
    from woolf.workloads.base import load_workload  # deferred: loads torch

    o = options if options is not None else CreateOptions()
    storage, weights, seed, signing_key = o.storage, o.weights, o.seed, o.signing_key
    path = Path(path).resolve()
    signers_text = _signers(signing_key, o.signer, o.extra_signers)
    if o.woolf_source:
        check_source(o.woolf_source)  # before anything is written
    _check_target(path)
    storage = storage or str(path.parent / f"{path.name}.storage")
    if "://" not in storage:
        storage = str(Path(storage).resolve())
    cfg = _new_config(path, o)  # validates everything before touching disk
    model_files: dict[str, bytes] = {}  # files the workload keeps in git (transformers: ledger/model/)
    if cfg.workload.name == "transformers":
        from woolf.workloads.hf import import_model_dir  # deferred: loads torch, safetensors

        imported = import_model_dir(weights, cfg.limits)  # refuses anything but a checked model directory
        cfg.workload.params = {**imported.params, **cfg.workload.params}
        model_files = imported.files
        if "delta.accept" not in (o.overrides or {}) and not LORA.accepted_by(cfg.delta.accept):
            cfg.delta.accept = [*cfg.delta.accept, LORA.name]
    elif weights is not None and Path(weights).is_dir():
        raise UsageError(f"--weights {weights} is a directory", hint="a Hugging Face model directory needs "
                         "--workload transformers; other workloads take one .safetensors file")
    wl = _workload_for_init(cfg, o)
    if weights is not None and _pretrained_defaults(cfg, wl, o.overrides or {}):
        wl = load_workload(cfg.workload)
    if model_files:
        wl.bind(model_files.get)
    bench = _benchmark_text(o.benchmark) if o.benchmark is not None else wl.benchmark_bytes()
    cfg.benchmark.sha256 = hashlib.sha256(bench).hexdigest()
    if model_files:  # float32 masters for a bf16/fp16 checkpoint, unless the config asks otherwise
        genesis = imported.as_dtype(wl.dtype)
    elif weights is not None:
        spec = read_spec(Path(weights), cfg.limits, "--weights")
        compare_spec(spec, spec_of(wl.genesis(seed)), f"--weights {weights}")
        genesis = load_checked(Path(weights), cfg.limits, label="--weights")
    else:
        genesis = wl.genesis(seed)

    metrics = wl.evaluate(genesis, bench, "cpu")  # genesis's loss: the first point of every curve
    if "limits.max_delta_bytes" not in (o.overrides or {}):  # a dense delta is the model's size
        cfg.limits.max_delta_bytes = max(cfg.limits.max_delta_bytes, delta_bytes_needed(genesis))

    make_dir(path, "PATH")
    try:
        git, store = Git(path), DvcStore(path)
        git.run("init", "-q", "-b", "main")
        (path / ".gitignore").write_text(layout.GITIGNORE)
        write_ci_files(path, o.woolf_source)
        (path / layout.CONFIG).parent.mkdir(parents=True, exist_ok=True)
        (path / layout.CONFIG).write_text(render_config(cfg))
        (path / cfg.benchmark.path).parent.mkdir(parents=True, exist_ok=True)
        (path / cfg.benchmark.path).write_bytes(bench)
        for rel, data in model_files.items():
            (path / rel).parent.mkdir(parents=True, exist_ok=True)
            (path / rel).write_bytes(data)
        if signers_text is not None:
            (path / SIGNERS_PATH).write_text(signers_text)
            configure(git, Path(signing_key))
            git.sign_key = str(Path(signing_key).resolve())
        init_dvc(path, storage)
        save_atomic(genesis, path / layout.WEIGHTS)
        ptr = store.add(path / layout.WEIGHTS)
        store.push(path / layout.POINTER, ptr)
        _, sha = hashes_of_file(path / layout.WEIGHTS)
        git.run("add", "-A")
        message = format_message(
            f"woolf: version 0 (genesis of {cfg.name})",
            {"Woolf-Version": 0, "Woolf-Weights-Sha256": sha,
             "Woolf-Source": (f"model directory {Path(weights).name}" if model_files else "weights file")
             if weights else f"{cfg.workload.name} seed {seed}",
             "Woolf-Metrics": metrics},
        )
        sign = ["-S"] if git.sign_key else []
        git.run(*git.sign_args(), "commit", "-q", *sign, "-F", "-", input=message.encode())
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
