"""A small GitHub REST client: token from the environment, pagination, retries with backoff.

Usage:
    api = GitHubAPI("https://api.github.com", token=os.environ["GITHUB_TOKEN"])
    pulls = api.paginate("GET", "/repos/o/r/pulls", params={"state": "all"})
    api.request("POST", "/repos/o/r/issues/7/comments", json={"body": "..."})

Retries 5xx, 429 and rate-limited 403s, honouring Retry-After (and
X-RateLimit-Reset), up to ``max_attempts``; other errors become ForgeError
with GitHub's message. Gitea and Forgejo serve the same paths under
``https://HOST/api/v1``.
"""

from __future__ import annotations

import os
import re
import time

import requests

from woolf.errors import ForgeError

TOKEN_VARS = ("WOOLF_GITHUB_TOKEN", "GITHUB_TOKEN", "GH_TOKEN")
_NEXT = re.compile(r'<([^>]+)>;\s*rel="next"')


def token_from_env() -> str | None:
    for var in TOKEN_VARS:
        if os.environ.get(var):
            return os.environ[var]
    return None


class GitHubAPI:
    def __init__(self, base_url: str, token: str | None = None, max_attempts: int = 5,
                 max_wait: float = 60.0, timeout: float = 30.0, sleep=time.sleep):
        self.base = base_url.rstrip("/")
        self.token = token if token is not None else token_from_env()
        self.max_attempts, self.max_wait, self.timeout, self.sleep = max_attempts, max_wait, timeout, sleep
        self.session = requests.Session()
        self.session.headers.update({"Accept": "application/vnd.github+json",
                                     "X-GitHub-Api-Version": "2022-11-28", "User-Agent": "goodwoolf"})
        if self.token:
            self.session.headers["Authorization"] = f"Bearer {self.token}"

    def _wait(self, resp: requests.Response | None, attempt: int) -> float:
        if resp is not None:
            after = resp.headers.get("Retry-After")
            if after and after.isdigit():
                return min(float(after), self.max_wait)
            reset = resp.headers.get("X-RateLimit-Reset")
            if resp.headers.get("X-RateLimit-Remaining") == "0" and reset and reset.isdigit():
                return min(max(0.0, float(reset) - time.time()) + 1, self.max_wait)
        return min(2.0 ** attempt, self.max_wait)

    @staticmethod
    def _retryable(resp: requests.Response) -> bool:
        if resp.status_code >= 500 or resp.status_code == 429:
            return True
        if resp.status_code == 403:
            text = resp.text.lower()
            return resp.headers.get("X-RateLimit-Remaining") == "0" or "rate limit" in text \
                or "Retry-After" in resp.headers
        return False

    def request(self, method: str, path: str, **kw) -> requests.Response:
        url = path if path.startswith("http") else f"{self.base}{path}"
        resp = None
        for attempt in range(self.max_attempts):
            try:
                resp = self.session.request(method, url, timeout=self.timeout, **kw)
            except requests.RequestException as exc:
                if attempt + 1 == self.max_attempts:
                    raise ForgeError(f"{method} {url}: {exc}", hint="is the forge reachable?") from None
                self.sleep(self._wait(None, attempt))
                continue
            if not self._retryable(resp) or attempt + 1 == self.max_attempts:
                break
            self.sleep(self._wait(resp, attempt))
        assert resp is not None
        if resp.status_code >= 400:
            try:
                message = resp.json().get("message", resp.text)
            except ValueError:
                message = resp.text
            hints = {401: "set a valid token in GITHUB_TOKEN (or WOOLF_GITHUB_TOKEN)",
                     403: "the token lacks permission, or the rate limit is exhausted",
                     404: "check forge.repo in ledger/woolf.toml and the token's access",
                     422: "GitHub refused the request's content"}
            raise ForgeError(f"{method} {path} -> {resp.status_code}: {str(message)[:300]}",
                             hint=hints.get(resp.status_code))
        return resp

    def json(self, method: str, path: str, **kw):
        resp = self.request(method, path, **kw)
        return resp.json() if resp.content else None

    def paginate(self, method: str, path: str, params: dict | None = None) -> list:
        items, url = [], path
        params = {"per_page": 100, **(params or {})}
        while url:
            resp = self.request(method, url, params=params)
            items += resp.json()
            m = _NEXT.search(resp.headers.get("Link", ""))
            url, params = (m.group(1), None) if m else (None, None)
        return items
