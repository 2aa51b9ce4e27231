"""Trees written from a base tree and a set of file changes, in a private index (nothing checked out).

Usage (Git.commit_tree_with calls it):
    tree = tree_with(git, "main", {"ledger/a.json": b"{}", "old.txt": None, "link": ("120000", b"target")})

One `read-tree`, one `hash-object` for every new file, one `update-index` for every change and one
`write-tree`: four git processes whatever the number of files. File bytes are stored as they are
(no filters); a path git would not check out (`../x`, `.git/config`, `a//b`) raises GitError.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from woolf.git.process import GitError


def tree_with(git, base: str, files: dict[str, bytes | tuple[str, bytes] | None]) -> str:
    """The id of ``base``'s tree with ``files`` written (a value may be (mode, bytes): another mode than
    100644) and removed (None); the working tree and the real index are untouched."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git.run("read-tree", base, env=env)
        entries = [(path, data if isinstance(data, tuple) else ("100644", data))
                   for path, data in files.items() if data is not None]
        blobs = write_blobs(git, [data for _, (_, data) in entries], Path(tmp))
        records = [(f"0 {'0' * 40}", path) for path, data in files.items() if data is None]
        records += [(f"{mode} {blob}", path) for (path, (mode, _)), blob in zip(entries, blobs, strict=True)]
        if records:  # removals (mode 0) and additions; a path's bytes as argv would pass them
            args = ("update-index", "-z", "--index-info")
            proc = git.run(*args, input=b"".join(f"{entry}\t".encode() + os.fsencode(path) + b"\0"
                                                 for entry, path in records), env=env)
            if b"Ignoring path" in proc.stderr:  # it skips a path it would not check out, and goes on
                raise GitError(args, 128, proc.stderr.decode(errors="replace"))
        return git.out("write-tree", env=env)


def write_blobs(git, contents: list[bytes], tmp: Path) -> list[str]:
    """Each of ``contents`` stored as a blob (through files in ``tmp``), in one `git hash-object`."""
    if not contents:
        return []
    paths = [tmp / f"blob-{i}" for i in range(len(contents))]
    for path, data in zip(paths, contents, strict=True):
        path.write_bytes(data)
    blobs = git.out("hash-object", "-w", "--no-filters", "--stdin-paths",
                    input="".join(f"{p}\n" for p in paths).encode()).split()
    if len(blobs) != len(contents):
        raise GitError(("hash-object",), 1, f"wrote {len(blobs)} blobs of {len(contents)}")
    return blobs
