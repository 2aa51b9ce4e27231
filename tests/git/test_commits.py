"""Commits read as attacker-written (woolf/git/commits.py): size first, many at once framed by size.

Each test builds a plain `git init` repository in tmp_path and writes commit objects by hand with
`git hash-object -w -t commit --literally` (any bytes at all, as a pushed object can hold), or
with `git commit-tree`. No ledger, no hub, no DVC.
"""

from __future__ import annotations

import subprocess

import pytest

from woolf.git import batch, commits
from woolf.git.commits import commit_bytes, commit_records, read_commit
from woolf.git.process import COMMIT_MAX_BYTES, BlobTooLargeError, GitError
from woolf.git.repo import Git

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]

MISSING = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(autouse=True)
def _fresh_cache(monkeypatch):
    """Every test starts with read_commit's per-process cache empty, and leaves the real one alone."""
    monkeypatch.setattr(commits, "_READ", {})


@pytest.fixture
def git(tmp_path) -> Git:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, capture_output=True)
    return Git(tmp_path)


def _tree(git: Git) -> str:
    return git.run("mktree", input=b"").stdout.decode().strip()


def _raw(tree: str, parents=(), message: bytes = b"msg\n", time: bytes = b"1700000000",
         committer: bytes | None = None) -> bytes:
    head = b"tree " + tree.encode() + b"\n"
    head += b"".join(b"parent " + p.encode() + b"\n" for p in parents)
    head += b"author a <a@x> 1 +0000\n"
    head += committer if committer is not None else b"committer c <c@x> " + time + b" +0000\n"
    return head + b"\n" + message


def _obj(git: Git, raw: bytes, kind: str = "commit") -> str:
    return git.run("hash-object", "-w", "-t", kind, "--literally", "--stdin", input=raw).stdout.decode().strip()


def _commit(git: Git, **kw) -> str:
    return _obj(git, _raw(_tree(git), **kw))


def _cat(git: Git, sha: str) -> bytes:
    return git.run("cat-file", "commit", sha).stdout


# -- commit_bytes ----------------------------------------------------------------------------------

def test_commit_bytes_are_the_objects_bytes(git):
    sha = _commit(git, message=b"hello\n\nWoolf-Version: 3\n")
    assert commit_bytes(git, sha) == _cat(git, sha)
    assert git.commit_bytes(sha) == _cat(git, sha)


def test_commit_bytes_of_a_message_with_every_byte_value(git):
    message = bytes(range(256)) * 4
    sha = _commit(git, message=message)
    raw = commit_bytes(git, sha)
    assert raw.endswith(b"\n\n" + message)
    assert raw == _cat(git, sha)


def test_commit_bytes_peels_refs_and_annotated_tags(git):
    sha = _commit(git)
    git.run("update-ref", "refs/heads/main", sha)
    tag = _obj(git, f"object {sha}\ntype commit\ntag v1\ntagger t <t> 1 +0000\n\nv1\n".encode(), "tag")
    git.run("update-ref", "refs/tags/v1", tag)
    assert commit_bytes(git, "refs/heads/main") == commit_bytes(git, "v1") == _cat(git, sha)


@pytest.mark.parametrize("name", [MISSING, "", "nope", "refs/heads/none", "HEAD"])
def test_commit_bytes_of_something_that_is_no_commit_is_a_git_error(git, name):
    with pytest.raises(GitError, match=r"git cat-file commit .*failed \(128\): not a commit"):
        commit_bytes(git, name)


@pytest.mark.parametrize("kind", ["tree", "blob"])
def test_commit_bytes_of_a_tree_or_blob_is_a_git_error(git, kind):
    sha = _tree(git) if kind == "tree" else _obj(git, b"data", "blob")
    with pytest.raises(GitError, match="not a commit"):
        commit_bytes(git, sha)


def test_a_name_with_a_newline_is_never_sent_to_git(git):
    """A second line would be a second request: the name is refused, not split."""
    sha = _commit(git)
    with pytest.raises(GitError, match="not a commit"):
        commit_bytes(git, f"{MISSING}\n{sha}")
    with pytest.raises(GitError, match="not a commit"):
        commit_bytes(git, f"{sha}\n")


def test_a_commit_of_exactly_max_bytes_is_read_and_one_more_is_refused(git):
    sha = _commit(git)
    size = len(_cat(git, sha))
    assert commit_bytes(git, sha, max_bytes=size) == _cat(git, sha)
    with pytest.raises(BlobTooLargeError, match=rf"^commit {sha[:12]} is {size} bytes, over the limit of {size - 1}$") \
            as info:
        commit_bytes(git, sha, max_bytes=size - 1)
    assert info.value.size == size


class _CountingStdout:
    """proc.stdout that records how many bytes were read from it."""

    def __init__(self, stream, counter: list):
        self._stream, self._counter = stream, counter

    def readline(self, limit=-1):
        line = self._stream.readline(limit)
        self._counter.append(len(line))
        return line

    def read(self, n=-1):
        data = self._stream.read(n)
        self._counter.append(len(data))
        return data

    def __getattr__(self, name):  # close, closed, fileno: what subprocess itself uses
        return getattr(self._stream, name)


@pytest.fixture
def bytes_read(monkeypatch) -> list:
    """Bytes read by commit_bytes from `git cat-file --batch`, one entry per read."""
    counter: list = []
    real = subprocess.Popen
    batch.close_all()  # every read in the test starts its git here: counted

    def popen(*args, **kw):
        proc = real(*args, **kw)
        proc.stdout = _CountingStdout(proc.stdout, counter)
        return proc

    monkeypatch.setattr(commits.subprocess, "Popen", popen)
    return counter


def test_a_commit_over_commit_max_bytes_is_refused_unread(git, bytes_read):
    sha = _commit(git, message=b"x" * (COMMIT_MAX_BYTES + 1))
    with pytest.raises(BlobTooLargeError, match=rf"over the limit of {COMMIT_MAX_BYTES}$"):
        commit_bytes(git, sha)
    assert sum(bytes_read) <= 512  # only the "<sha> commit <size>" line
    with pytest.raises(BlobTooLargeError):
        git.commit_bytes(sha)


def test_a_giant_commit_under_a_small_limit_is_refused_without_waiting_for_git(git, bytes_read):
    sha = _commit(git, message=b"y" * (4 << 20))
    with pytest.raises(BlobTooLargeError, match=r"is \d+ bytes, over the limit of 100$"):
        commit_bytes(git, sha, max_bytes=100)
    assert sum(bytes_read) < 100


# -- commit_records --------------------------------------------------------------------------------

def test_records_of_several_commits_in_the_order_asked(git):
    tree = _tree(git)
    root = _obj(git, _raw(tree, message=b"root\n", time=b"100"))
    child = _obj(git, _raw(tree, [root], message=b"child\n", time=b"200"))
    merge = _obj(git, _raw(tree, [child, root], message=b"merge\n\nWoolf-Version: 2\n", time=b"300"))
    assert commit_records(git, [merge, root, child]) == [
        (merge, [child, root], 300, "merge\n\nWoolf-Version: 2\n"),
        (root, [], 100, "root\n"),
        (child, [root], 200, "child\n"),
    ]
    assert git.commit_records([root]) == [(root, [], 100, "root\n")]


def test_records_of_commits_made_by_commit_tree(git):
    tree = _tree(git)
    env = {"GIT_COMMITTER_DATE": "1234567890 +0200"}
    first = git.run("commit-tree", tree, "-m", "first", env=env).stdout.decode().strip()
    second = git.run("commit-tree", tree, "-p", first, "-m", "second", env=env).stdout.decode().strip()
    assert commit_records(git, [second, first]) == [
        (second, [first], 1234567890, "second\n"), (first, [], 1234567890, "first\n")]


@pytest.mark.parametrize("shas", [[], [""], ["", ""], [f"{MISSING}\n"], ["\n"]])
def test_no_names_give_no_records(git, shas):
    assert commit_records(git, shas) == []


def test_a_message_that_forges_a_batch_record_stays_one_message(git):
    """A message holding what `cat-file --batch` prints (a header line, another object, a separator)."""
    tree = _tree(git)
    honest = _obj(git, _raw(tree, message=b"honest\n", time=b"111"))
    honest_raw = _cat(git, honest)
    forged = (b"subject\n" + f"{honest} commit {len(honest_raw)}\n".encode() + honest_raw + b"\n"
              + f"{MISSING} commit 5\nabcde\n".encode() + b"\x1e\x1f%x1e\n\n" + b"\x00" * 3
              + f"\n{honest} missing\n".encode())
    hostile = _obj(git, _raw(tree, message=forged, time=b"222"))
    records = commit_records(git, [hostile, honest])
    assert [(r[0], r[2]) for r in records] == [(hostile, 222), (honest, 111)]
    assert records[0][3] == forged.decode()
    assert records[1][3] == "honest\n"


def test_a_message_cut_where_a_record_would_end_is_not_misread(git):
    """A message ending without a newline, or in many newlines, is framed by its size alone."""
    tree = _tree(git)
    shas = [_obj(git, _raw(tree, message=m, time=b"5")) for m in (b"", b"no newline", b"\n\n\n\n", b"\n")]
    assert [r[3] for r in commit_records(git, shas)] == ["", "no newline", "\n\n\n\n", "\n"]


def test_message_bytes_that_are_not_utf8_read_as_replacement_characters(git):
    sha = _commit(git, message=b"caf\xe9 \xff\xfe \xed\xa0\x80 ok \xc3\xa9\n")
    ((_, _, _, message),) = commit_records(git, [sha])
    assert message == "caf\ufffd \ufffd\ufffd \ufffd\ufffd\ufffd ok \u00e9\n"


def test_a_commit_without_a_message_separator_has_an_empty_message(git):
    sha = _obj(git, _raw(_tree(git), message=b"")[:-1])  # header only, no blank line
    assert commit_records(git, [sha]) == [(sha, [], 1700000000, "")]


def test_a_committer_line_in_the_message_does_not_set_the_time(git):
    sha = _commit(git, message=b"subject\n\ncommitter evil <e> 99999 +0000\nparent " + MISSING.encode() + b"\n",
                  time=b"42")
    assert commit_records(git, [sha])[0][:3] == (sha, [], 42)


def test_missing_and_non_commit_objects_are_left_out(git):
    tree = _tree(git)
    good = _obj(git, _raw(tree, time=b"7"))
    blob = _obj(git, b"blob", "blob")
    tag = _obj(git, f"object {good}\ntype commit\ntag v\ntagger t <t> 1 +0000\n\nv\n".encode(), "tag")
    names = [MISSING, good, tree, "not a name", blob, tag, good[:4] + "zz", good]
    assert commit_records(git, names) == [(good, [], 7, "msg\n"), (good, [], 7, "msg\n")]


def test_a_name_with_a_newline_cannot_inject_a_second_request(git):
    good = _commit(git)
    assert commit_records(git, [f"{MISSING}\n{good}", f"{good}\n"]) == []


def test_commits_over_max_bytes_are_left_out_and_at_max_bytes_kept(git):
    tree = _tree(git)
    small = _obj(git, _raw(tree, message=b"s\n"))
    big = _obj(git, _raw(tree, message=b"b" * 100 + b"\n"))
    limit = len(_cat(git, small))
    assert [r[0] for r in commit_records(git, [big, small, big], max_bytes=limit)] == [small]


def test_a_commit_over_commit_max_bytes_is_left_out_among_others(git):
    tree = _tree(git)
    giant = _obj(git, _raw(tree, message=b"g" * (COMMIT_MAX_BYTES + 1)))
    small = _obj(git, _raw(tree, message=b"s\n", time=b"9"))
    assert commit_records(git, [giant, small, giant]) == [(small, [], 9, "s\n")]


@pytest.mark.parametrize("committer", [
    b"",                                            # no committer line at all
    b"committer c <c@x>\n",                         # no time
    b"committer c <c@x> +0000\n",
    b"committer c <c@x> -5 +0000\n",
    b"committer c <c@x> 1.5 +0000\n",
    b"committer c <c@x> 1e9 +0000\n",
    b"committer c <c@x> \xd9\xa1\xd9\xa2 +0000\n",  # Arabic-Indic digits
    b"committer c <c@x> 1234567890123 +0000\n",     # 13 digits
    b"committer c <c@x> " + b"9" * 5000 + b" +0000\n",
    b"committer 123\n",
])
def test_a_commit_without_a_readable_committer_time_is_left_out(git, committer):
    tree = _tree(git)
    bad = _obj(git, _raw(tree, committer=committer))
    good = _obj(git, _raw(tree, time=b"3"))
    assert commit_records(git, [bad, good, bad]) == [(good, [], 3, "msg\n")]


def test_a_twelve_digit_committer_time_is_read(git):
    sha = _commit(git, time=b"999999999999")
    assert commit_records(git, [sha])[0][2] == 999999999999


def test_many_commits_are_each_framed_by_size(git, tmp_path):
    """Two hundred hand-made commits, each message a forged batch record of its neighbour."""
    tree = _tree(git)
    files = []
    for i in range(200):
        message = (f"m{i}\n{MISSING} commit {i}\n".encode() + b"\x00\x1e" * i + b"\n\n" + b"\xff" * (i % 3)
                   + f"Woolf-Version: {i}\n".encode())
        f = tmp_path / f"c{i}"
        f.write_bytes(_raw(tree, message=message, time=str(1000 + i).encode()))
        files.append(str(f))
    shas = git.run("hash-object", "-w", "-t", "commit", "--literally", "--stdin-paths",
                   input="\n".join(files).encode() + b"\n").stdout.decode().split()
    assert len(set(shas)) == 200
    records = commit_records(git, shas)
    assert [r[0] for r in records] == shas
    assert [r[2] for r in records] == [1000 + i for i in range(200)]
    assert all(r[3].startswith(f"m{i}\n") and r[3].endswith(f"Woolf-Version: {i}\n")
               for i, r in enumerate(records))


def test_hostile_parent_lines_are_refused_as_git_refuses_them(git):
    """A parent line right after the tree that is no object id makes a commit git will not parse:
    commit_records leaves it out, read_commit raises GitError; neither passes the text on."""
    sha = _obj(git, _raw(_tree(git)).replace(b"author", b"parent not-a-sha\nparent --all\nauthor", 1))
    assert commit_records(git, [sha]) == []
    with pytest.raises(GitError):  # git itself will not peel it to a commit
        read_commit(git, sha)


def test_a_parent_line_that_is_not_utf8_does_not_crash_the_reading(git):
    tree = _tree(git)
    bad = _obj(git, _raw(tree).replace(b"author", b"parent \xff\xfe\nauthor", 1))
    good = _obj(git, _raw(tree, time=b"3"))
    records = commit_records(git, [bad, good])
    assert records == [(good, [], 3, "msg\n")]  # the commit git would not parse is left out


# -- read_commit -----------------------------------------------------------------------------------

def test_read_commit_gives_parents_and_message(git):
    tree = _tree(git)
    a = _obj(git, _raw(tree, message=b"a\n"))
    b = _obj(git, _raw(tree, [a], message=b"b\n"))
    m = _obj(git, _raw(tree, [b, a], message=b"merge\n\nbody\n\nWoolf-Version: 9\n"))
    assert read_commit(git, a) == ([], "a\n")
    assert read_commit(git, b) == ([a], "b\n")
    assert read_commit(git, m) == ([b, a], "merge\n\nbody\n\nWoolf-Version: 9\n")


def test_read_commit_replaces_bytes_that_are_not_utf8(git):
    sha = _commit(git, message=b"\xff subject \xc3\n")
    assert read_commit(git, sha) == ([], "\ufffd subject \ufffd\n")


def test_read_commit_of_a_missing_commit_is_a_git_error(git):
    with pytest.raises(GitError, match="not a commit"):
        read_commit(git, MISSING)
    assert MISSING not in commits._READ


def test_read_commit_is_remembered_per_commit_id(git, monkeypatch):
    sha = _commit(git, message=b"once\n")
    parents, message = read_commit(git, sha)
    assert commits._READ == {sha: ([], "once\n")}

    def no_git(*a, **kw):
        raise AssertionError("read again")

    monkeypatch.setattr(commits, "commit_bytes", no_git)
    assert read_commit(git, sha) == (parents, message)


def test_read_commit_returns_copies_a_caller_cannot_poison(git):
    tree = _tree(git)
    a = _obj(git, _raw(tree))
    b = _obj(git, _raw(tree, [a]))
    read_commit(git, b)[0].append("poison")
    parents, _ = read_commit(git, b)
    parents.clear()
    assert read_commit(git, b) == ([a], "msg\n")


def test_read_commit_by_a_name_that_is_no_commit_id_is_not_remembered(git):
    sha = _commit(git)
    git.run("update-ref", "refs/heads/main", sha)
    for name in ("refs/heads/main", sha[:12], sha.upper()):
        assert read_commit(git, name) == ([], "msg\n")
    assert commits._READ == {}


def test_a_message_of_65536_characters_is_remembered_and_a_longer_one_is_not(git):
    kept = _commit(git, message=b"k" * 65536)
    giant = _commit(git, message=b"g" * 65537)
    assert read_commit(git, kept)[1] == "k" * 65536
    assert read_commit(git, giant)[1] == "g" * 65537
    assert list(commits._READ) == [kept]


def test_a_commit_over_commit_max_bytes_is_refused_by_read_commit_and_not_kept(git):
    sha = _commit(git, message=b"z" * COMMIT_MAX_BYTES)
    with pytest.raises(BlobTooLargeError, match=rf"over the limit of {COMMIT_MAX_BYTES}$"):
        read_commit(git, sha)
    assert commits._READ == {}


def test_the_cache_is_emptied_when_it_grows_past_4096_commits(git, monkeypatch):
    fake = {f"{i:040x}": ([], "m") for i in range(4097)}
    monkeypatch.setattr(commits, "_READ", fake)
    sha = _commit(git)
    read_commit(git, sha)
    assert commits._READ == {sha: ([], "msg\n")}


def test_the_cache_at_4096_commits_is_kept(git, monkeypatch):
    fake = {f"{i:040x}": ([], "m") for i in range(4096)}
    monkeypatch.setattr(commits, "_READ", fake)
    sha = _commit(git)
    read_commit(git, sha)
    assert len(commits._READ) == 4097 and sha in commits._READ


def _after_committer(git: Git, line: bytes) -> str:
    """A commit with ``line`` as an extra header after the committer: git reads it as no parent."""
    return _obj(git, _raw(_tree(git)).replace(b"\n\n", b"\n" + line + b"\n\n", 1))


def test_a_parent_line_without_an_id_does_not_crash_read_commit(git):
    sha = _after_committer(git, b"parent ")
    assert git.run("cat-file", "-t", sha).stdout == b"commit\n"
    parents, message = read_commit(git, sha)
    assert (parents, message) == ([], "msg\n")  # an extra header, as git reads it


def test_a_non_utf8_parent_header_after_the_committer_does_not_crash_commit_records(git):
    sha = _after_committer(git, b"parent \xff")
    assert read_commit(git, sha)[1] == "msg\n"
    assert commit_records(git, [sha])[0][3] == "msg\n"


def test_parents_are_the_parents_git_reads(git):
    tree = _tree(git)
    real = _obj(git, _raw(tree, message=b"real parent\n"))
    claimed = _obj(git, _raw(tree, message=b"claimed parent\n"))
    sha = _obj(git, _raw(tree, [real]).replace(b"\n\n", f"\nparent {claimed}\n\n".encode(), 1))
    git.run("fsck", "--strict", "--no-dangling")  # git finds nothing wrong with it
    assert git.out("rev-list", "--parents", "-n1", sha).split()[1:] == [real]
    assert commit_records(git, [sha])[0][1] == [real]
    assert read_commit(git, sha)[0] == [real]


def test_an_upper_case_parent_id_is_read_as_git_reads_it(git):
    """git parses a parent id in either case (fsck --strict passes it) and means the lower-case
    commit; the readers agree with git instead of refusing the commit or passing the text on."""
    tree = _tree(git)
    parent = _obj(git, _raw(tree, message=b"parent\n"))
    sha = _obj(git, _raw(tree, [parent.upper()]))
    assert git.out("rev-list", "--parents", "-n1", sha).split()[1:] == [parent]
    assert commit_records(git, [sha])[0][1] == [parent]
    assert read_commit(git, sha)[0] == [parent]
