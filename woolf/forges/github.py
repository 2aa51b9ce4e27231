"""The GitHub forge (also Gitea/Forgejo): submissions as real pull requests, verdicts as comments.

Usage:
    forge = GitHubForge(ledger.git, ledger.config.forge)        # token from GITHUB_TOKEN
    forge.open(sub_id, head)        # pushes branch woolf/<id> to the fork (or origin), opens the PR
    forge.list(state="open")

A PR belongs to the ledger when its head branch is `woolf/<submission id>`.
State: open; merged (GitHub marks a PR merged once its head is in main, which
a version commit's second parent makes so); rejected (closed, label
`woolf:rejected`); expired (closed, label `woolf:expired`: no quorum of votes in
time); withdrawn (closed otherwise). Each verdict is a comment with a markdown
table and the machine-readable record, a label and a commit status. Under a
quorum each validator's vote is also a commit status `woolf/vote/<name>` on the
head (the vote itself is a signed commit pushed to the repository's
`refs/woolf/pr/<id>/votes/<name>`, as on the git-native forge).
PR heads are fetched as data from `refs/pull/<n>/head` into `refs/woolf/gh/`.
"""

from __future__ import annotations

import json
import re

from woolf.errors import ForgeError, RaceLostError, UsageError
from woolf.forges.base import Forge, PullRequest, disown_unsigned, fill_from_submission
from woolf.protocol import layout
from woolf.protocol.trailers import parse_message

BRANCH_PREFIX = "woolf/"
LOCAL_PREFIX = "refs/woolf/gh"
MARKER = re.compile(r"<!-- woolf-verdict (\{.*?\}) -->", re.S)
STATUS_CONTEXT = "woolf/validate"
WRITE_ROLES = ("OWNER", "MEMBER", "COLLABORATOR")  # comment authors who may write verdicts by default
ACTIONS_BOT = "github-actions[bot]"  # the repository's own workflows (the validate workflow's comments)
VOTE_CONTEXT = "woolf/vote"  # validators.quorum > 1: one status per validator, woolf/vote/<name>


def verdict_markdown(state: str, reason: str, fields: dict) -> str:
    def cell(v) -> str:
        text = json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else str(v)
        return text.replace("|", "\\|").replace("\n", " ").replace("<", "&lt;")[:300]

    before = (fields.get("Woolf-Metrics-Before") or {})
    after = (fields.get("Woolf-Metrics-After") or {})
    rows = [("state", state), ("version", fields.get("Woolf-Version")),
            ("staleness", fields.get("Woolf-Staleness")), ("attenuation", fields.get("Woolf-Attenuation"))]
    rows += [(f"{k} before -> after", f"{before.get(k)} -> {after.get(k)}") for k in sorted(set(before) | set(after))]
    rows += [("reason", reason), ("validator", fields.get("Woolf-Validator"))]
    record = {"state": state, "reason": reason, **{k: v for k, v in fields.items() if v is not None}}
    table = "\n".join(f"| {cell(k)} | {cell(v)} |" for k, v in rows if v is not None)
    marker = json.dumps(record, sort_keys=True).replace("--", "- -")
    return f"### woolf verdict: {state}\n\n| | |\n|---|---|\n{table}\n\n<!-- woolf-verdict {marker} -->\n"


class GitHubForge(Forge):
    # batches_verdicts and votes_ride_verdicts stay False: a verdict is API calls, not a ref in a push;
    # vote_status shows each validator's vote as a commit status

    def __init__(self, git, cfg, api=None, remote: str = "origin",
                 fork_remote: str | None = None, fork_owner: str | None = None):
        if not cfg.repo:
            raise UsageError("forge.repo is not set", hint="set [forge] repo = 'owner/name' in ledger/woolf.toml")
        self.git, self.cfg, self.remote = git, cfg, remote
        if api is None:  # requests (80 ms to import) only where the GitHub forge is used
            from woolf.forges.github_api import GitHubAPI  # deferred: loads requests

            api = GitHubAPI(cfg.api_url)
        self.api = api
        self.fork_remote, self.fork_owner = fork_remote, fork_owner
        self._pulls: dict[str, dict] | None = None
        self.repo_path = f"/repos/{cfg.repo}"

    # -- reading ---------------------------------------------------------------
    def sync(self) -> None:
        pulls = self.api.paginate("GET", f"{self.repo_path}/pulls", params={"state": "all"})
        self._pulls = {}
        for p in pulls:
            ref = p.get("head", {}).get("ref", "")
            sub_id = ref[len(BRANCH_PREFIX):] if ref.startswith(BRANCH_PREFIX) else ""
            if layout.SUBMISSION_ID.match(sub_id):
                self._pulls[sub_id] = p
        wanted = [f"+refs/pull/{p['number']}/head:{LOCAL_PREFIX}/{i}/head"
                  for i, p in self._pulls.items() if p["state"] == "open"]
        if wanted:
            self.git.fetch(self.remote, *wanted)

    def _record(self, sub_id: str, p: dict) -> PullRequest:
        labels = {lb.get("name") for lb in p.get("labels", [])}
        if p["state"] == "open":
            state = "open"
        elif p.get("merged_at"):
            state = "merged"
        elif "woolf:rejected" in labels:
            state = "rejected"
        elif "woolf:expired" in labels:
            state = "expired"
        else:
            state = "withdrawn"
        pr = PullRequest(id=sub_id, state=state, head=p["head"]["sha"], number=p["number"],
                         author=(p.get("user") or {}).get("login"), base_sha=p.get("base", {}).get("sha"))
        if self.git.run("cat-file", "-e", f"{pr.head}^{{commit}}", check=False).returncode == 0:
            fill_from_submission(self.git, pr)
        return pr

    def list(self, state: str | None = None, local_only: bool = False) -> list[PullRequest]:
        if self._pulls is None or not local_only:
            self.sync()
        # a PR in a keyed contributor's name that the key did not sign is nobody's (as on the local forge)
        prs = disown_unsigned(self.git, [self._record(i, p) for i, p in sorted(self._pulls.items())])
        return [p for p in prs if state is None or p.state == state]

    def get(self, sub_id: str, fetch: bool = True) -> PullRequest:
        if self._pulls is None or sub_id not in self._pulls:
            self.sync()
        if sub_id not in self._pulls:
            raise UsageError(f"no pull request for submission {sub_id} on {self.cfg.repo}")
        if fetch:
            self._pulls[sub_id] = self.api.json("GET", f"{self.repo_path}/pulls/{self._pulls[sub_id]['number']}")
        [pr] = disown_unsigned(self.git, [self._record(sub_id, self._pulls[sub_id])])
        if pr.state != "open":
            self._read_verdict(pr)
        return pr

    def _me(self) -> str | None:
        """The authenticated account's login (GET /user, asked once); None without a usable token."""
        if not hasattr(self, "_login"):
            try:
                me = self.api.json("GET", "/user")
                self._login = me.get("login") if isinstance(me, dict) and isinstance(me.get("login"), str) else None
            except ForgeError:
                self._login = None
        return self._login

    def _by_validator(self, c: dict) -> bool:
        """Whether a comment may carry a verdict: anyone can comment on a public PR. Its author is one
        of `forge.verdict_authors` when the config lists them; otherwise this clone's own account, the
        repository's own workflows (github-actions[bot]: woolf-validate.yml posts with the workflow's
        token, which a fork's PR does not get with write access) or an account with write access to
        the repository (author_association OWNER/MEMBER/COLLABORATOR)."""
        login = (c.get("user") or {}).get("login") if isinstance(c.get("user"), dict) else None
        allowed = list(getattr(self.cfg, "verdict_authors", None) or [])
        if allowed:
            return isinstance(login, str) and login in allowed
        if isinstance(login, str) and login in (self._me(), ACTIONS_BOT):
            return True
        return c.get("author_association") in WRITE_ROLES

    def _read_verdict(self, pr: PullRequest) -> None:
        comments = self.api.paginate("GET", f"{self.repo_path}/issues/{pr.number}/comments")
        for c in reversed(comments):
            if not isinstance(c, dict) or not self._by_validator(c):
                continue  # a stranger's comment with a verdict marker says nothing about the PR
            m = MARKER.search(c.get("body") or "")
            if m:
                try:
                    rec = json.loads(m.group(1))
                except (ValueError, RecursionError):  # anyone can comment: a marker may be hostile
                    continue
                if not isinstance(rec, dict):
                    continue
                pr.reason = rec.get("reason")
                pr.staleness, pr.attenuation = rec.get("Woolf-Staleness"), rec.get("Woolf-Attenuation")
                pr.metrics_before, pr.metrics_after = rec.get("Woolf-Metrics-Before"), rec.get("Woolf-Metrics-After")
                pr.version, pr.validator = rec.get("Woolf-Version"), rec.get("Woolf-Validator")
                pr.timings = rec.get("Woolf-Timings")
                retrain = rec.get("Woolf-Retrain")
                pr.retrain = retrain if isinstance(retrain, dict) else None
                return

    # -- writing ---------------------------------------------------------------
    def open(self, sub_id: str, head: str, also=None) -> PullRequest:
        self._no_also(also)
        branch = f"{BRANCH_PREFIX}{sub_id}"
        remote = self.fork_remote or self.remote
        self.git.push(remote, [(head, f"refs/heads/{branch}")], leases={f"refs/heads/{branch}": None})
        head_ref = f"{self.fork_owner}:{branch}" if self.fork_owner else branch
        p = self.api.json("POST", f"{self.repo_path}/pulls", json={
            "title": f"woolf: submission {sub_id}", "head": head_ref, "base": "main",
            "body": f"Submission `{sub_id}` opened by `woolf submit`. A validator will comment its verdict.",
            "maintainer_can_modify": False})
        if self._pulls is not None:
            self._pulls[sub_id] = p
        return PullRequest(id=sub_id, state="open", head=head, number=p["number"])

    def comment(self, sub_id: str, text: str) -> None:
        pr = self.get(sub_id, fetch=False)
        self.api.json("POST", f"{self.repo_path}/issues/{pr.number}/comments", json={"body": text})

    def _verdict(self, pr: PullRequest, state: str, reason: str, fields: dict) -> None:
        self.api.json("POST", f"{self.repo_path}/issues/{pr.number}/comments",
                      json={"body": verdict_markdown(state, reason, fields)})
        self.api.json("POST", f"{self.repo_path}/issues/{pr.number}/labels", json={"labels": [f"woolf:{state}"]})
        self.api.json("POST", f"{self.repo_path}/statuses/{pr.head}", json={
            "state": "success" if state == "merged" else "failure", "context": STATUS_CONTEXT,
            "description": reason[:140]})

    def _current(self, pr: PullRequest) -> dict:
        p = self.api.json("GET", f"{self.repo_path}/pulls/{pr.number}")
        if p["state"] != "open":
            raise RaceLostError(f"PR #{pr.number} was closed meanwhile")
        if p["head"]["sha"] != pr.head:
            raise RaceLostError(f"PR #{pr.number}'s head changed from {pr.head[:12]} to "
                                f"{p['head']['sha'][:12]} after evaluation; it is evaluated again")
        return p

    def reject(self, pr: PullRequest, reason: str, fields: dict, also=None) -> None:
        self._no_also(also)  # a verdict here is API calls: votes are pushed on their own
        self._current(pr)
        self._verdict(pr, "rejected", reason, fields)
        self.api.json("PATCH", f"{self.repo_path}/pulls/{pr.number}", json={"state": "closed"})

    def expire(self, pr: PullRequest, reason: str, fields: dict) -> None:
        """Close a PR whose votes never reached quorum in time (validators.vote_timeout)."""
        self._current(pr)
        self._verdict(pr, "expired", reason, fields)
        self.api.json("PATCH", f"{self.repo_path}/pulls/{pr.number}", json={"state": "closed"})

    def vote_status(self, pr: PullRequest, voter: str, decision: str, reason: str) -> None:
        """Each validator's vote, visible on the PR: a commit status `woolf/vote/<validator>` on its head."""
        self.api.json("POST", f"{self.repo_path}/statuses/{pr.head}", json={
            "state": "success" if decision == "accept" else "failure", "context": f"{VOTE_CONTEXT}/{voter}",
            "description": f"{decision}: {reason}"[:140]})

    def merge(self, pr: PullRequest, version_commit: str, main_sha: str, also=None) -> None:
        self._no_also(also)
        self._current(pr)  # nothing is merged that was not evaluated at this head
        self.git.push(self.remote, [(version_commit, layout.MAIN)], leases={layout.MAIN: main_sha})
        _, fields = _trailers(self.git.message(version_commit))
        self._verdict(pr, "merged", fields.pop("Woolf-Reason", "merged"), fields)

    def withdraw(self, sub_id: str, by: str | None = None, force: bool = False) -> PullRequest:
        # GitHub decides who may close a pull request (its author or a maintainer) and records who did
        pr = self.get(sub_id)
        if pr.state != "open":
            raise UsageError(f"{sub_id} is already {pr.state}")
        self.api.json("PATCH", f"{self.repo_path}/pulls/{pr.number}", json={"state": "closed"})
        return self.get(sub_id)


def _trailers(message: str) -> tuple[str, dict]:
    subject, raw = parse_message(message)
    fields: dict = {}
    for k, v in raw.items():
        try:
            fields[k] = json.loads(v)
        except json.JSONDecodeError:
            fields[k] = v
    return subject, fields
