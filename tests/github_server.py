"""A local HTTP server speaking the part of GitHub's REST API that woolf uses.

Usage:
    with GitHubServer(spec, token="t", repos={"owner/ledger": hub_bare, "alice/ledger": fork_bare}) as gh:
        gh.url          # http://127.0.0.1:PORT
        gh.errors       # every OpenAPI violation seen, in requests and in responses

Every request the adapter sends and every response this server gives is
validated against GitHub's official OpenAPI description (@octokit/openapi).
Responses are generated from the description's own schemas, then filled with
this server's state; pull requests live on real bare git repositories, with
`refs/pull/<n>/head` as GitHub keeps them.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import requests
from openapi_core import Config, OpenAPI
from openapi_core.contrib.requests import RequestsOpenAPIRequest, RequestsOpenAPIResponse

from woolf.git.repo import clean_env

OPENAPI_VERSION = "23.0.2"
CACHE = Path(__file__).parent / ".cache" / "octokit-openapi"


def spec_path() -> Path | None:
    """The description, fetched once from npm (`npm pack @octokit/openapi`) into tests/.cache."""
    path = CACHE / "package" / "generated" / "api.github.com.json"
    if path.exists():
        return path
    CACHE.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run(["npm", "pack", f"@octokit/openapi@{OPENAPI_VERSION}", "--pack-destination", str(CACHE)],
                       check=True, capture_output=True, timeout=300)
        tgz = next(CACHE.glob("octokit-openapi-*.tgz"))
        subprocess.run(["tar", "xzf", str(tgz), "-C", str(CACHE)], check=True)
    except (OSError, subprocess.SubprocessError, StopIteration):
        return None
    return path if path.exists() else None


class SchemaFaker:
    """Instances of the description's schemas: required fields only, each with a plausible value."""

    def __init__(self, spec: dict):
        self.spec = spec

    def resolve(self, schema: dict) -> dict:
        while "$ref" in schema:
            node = self.spec
            for part in schema["$ref"].lstrip("#/").split("/"):
                node = node[part]
            schema = node
        return schema

    def make(self, schema: dict, depth: int = 0):
        schema = self.resolve(schema)
        if "allOf" in schema:
            out: dict = {}
            for sub in schema["allOf"]:
                out.update(self.make(sub, depth))
            return out
        for key in ("oneOf", "anyOf"):
            if key in schema:
                return self.make(schema[key][0], depth)
        if "enum" in schema:
            return schema["enum"][0]
        kind = schema.get("type", "object")
        if kind == "object":
            props = schema.get("properties", {})
            return {k: self.make(props.get(k, {"type": "string"}), depth + 1) for k in schema.get("required", [])}
        if kind == "array":
            return []
        if kind == "integer":
            return 1
        if kind == "number":
            return 1.0
        if kind == "boolean":
            return False
        fmt = schema.get("format")
        return {"date-time": "2026-11-29T00:00:00Z", "uri": "https://example.invalid/x",
                "email": "x@example.invalid"}.get(fmt, "x")


def merge(base, over):
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = merge(base.get(k), v) if k in base else v
        return out
    return over


def _git(*args, cwd) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          env=clean_env()).stdout.decode().strip()


class GitHubServer:
    def __init__(self, spec_file: Path, token: str, repos: dict[str, Path]):
        self.spec = json.loads(Path(spec_file).read_text())
        self.api = OpenAPI.from_dict(self.spec, config=Config(spec_validator_cls=None))
        self.faker = SchemaFaker(self.spec)
        self.token, self.repos = token, {k: Path(v).resolve() for k, v in repos.items()}
        # token -> (login, author_association on the repos' comments); add_user for more accounts
        self.users: dict[str, tuple[str, str]] = {token: ("woolf-bot", "OWNER")}
        self._who: tuple[str, str] = self.users[token]
        self.pulls: dict[str, dict[int, dict]] = {name: {} for name in self.repos}
        self.comments: dict[tuple[str, int], list] = {}
        self.statuses: dict[str, list] = {}
        self.errors: list[str] = []
        self.faults: list[dict] = []  # {"method", "path" regex, "status", "headers", "body", "times"}
        self.log: list[tuple[str, str, int]] = []
        self._lock = threading.Lock()
        self._counter = 0

    def add_user(self, token: str, login: str, association: str = "NONE") -> None:
        """Another account: its token, its login and how it relates to the repositories."""
        self.users[token] = (login, association)

    # -- schema helpers ---------------------------------------------------------
    def _schema(self, template: str, method: str, status: int) -> dict:
        op = self.spec["paths"][template][method.lower()]
        return op["responses"][str(status)]["content"]["application/json"]["schema"]

    def _fake(self, template, method, status, over):
        return merge(self.faker.make(self._schema(template, method, status)), over)

    def _pull_json(self, repo: str, n: int, simple: bool = False) -> dict:
        p = self.pulls[repo][n]
        bare = self.repos[repo]
        merged = subprocess.run(["git", "merge-base", "--is-ancestor", p["head_sha"], "refs/heads/main"],
                                cwd=bare, capture_output=True, env=clean_env()).returncode == 0
        state = "closed" if (p["closed"] or merged) else "open"
        owner = p["head_owner"]
        label_schema = self.faker.resolve({"$ref": "#/components/schemas/label"})
        over = {
            "number": n, "id": n, "state": state, "title": p["title"], "body": p["body"],
            "merged_at": "2026-11-29T01:00:00Z" if merged else None,
            "closed_at": "2026-11-29T01:00:00Z" if state == "closed" else None,
            "labels": [merge(self.faker.make(label_schema), {"name": lb}) for lb in p["labels"]],
            "user": {"login": owner},
            "head": {"ref": p["head_ref"], "sha": p["head_sha"], "label": f"{owner}:{p['head_ref']}",
                     "user": {"login": owner}},
            "base": {"ref": "main", "sha": _git("rev-parse", "refs/heads/main", cwd=bare), "label": "main"},
        }
        if not simple:
            over.update({"merged": merged, "mergeable": None, "merged_by": None})
        fake = self.faker.make(self.faker.resolve({"$ref": "#/components/schemas/" +
                                                   ("pull-request-simple" if simple else "pull-request")}))
        return merge(fake, over)

    # -- request handling ---------------------------------------------------------
    def handle(self, method: str, path: str, query: dict, headers: dict, body: bytes):
        for fault in self.faults:
            if fault["method"] == method and re.search(fault["path"], path) and fault["times"] > 0:
                fault["times"] -= 1
                return fault["status"], fault.get("headers", {}), fault.get("body", {"message": "injected"}), None
        auth = headers.get("Authorization", "")
        who = self.users.get(auth[len("Bearer "):]) if auth.startswith("Bearer ") else None
        if who is None:
            return 401, {}, {"message": "Bad credentials", "documentation_url": "https://docs.github.com"}, None
        data = json.loads(body) if body else None
        if method == "GET" and path == "/user":
            user = self.faker.resolve({"$ref": "#/components/schemas/private-user"})
            return 200, {}, merge(self.faker.make(user), {"login": who[0], "user_view_type": "private"}), "/user"
        m = re.fullmatch(r"/repos/([^/]+/[^/]+)/(.*)", path)
        if not m or m.group(1) not in self.repos:
            return 404, {}, {"message": "Not Found", "documentation_url": "https://docs.github.com"}, None
        repo, rest = m.groups()
        routes = [
            ("POST", r"pulls", self._create_pull, "/repos/{owner}/{repo}/pulls", 201),
            ("GET", r"pulls", self._list_pulls, "/repos/{owner}/{repo}/pulls", 200),
            ("GET", r"pulls/(\d+)", self._get_pull, "/repos/{owner}/{repo}/pulls/{pull_number}", 200),
            ("PATCH", r"pulls/(\d+)", self._update_pull, "/repos/{owner}/{repo}/pulls/{pull_number}", 200),
            ("POST", r"issues/(\d+)/comments", self._comment, "/repos/{owner}/{repo}/issues/{issue_number}/comments", 201),
            ("GET", r"issues/(\d+)/comments", self._comments, "/repos/{owner}/{repo}/issues/{issue_number}/comments", 200),
            ("POST", r"issues/(\d+)/labels", self._labels, "/repos/{owner}/{repo}/issues/{issue_number}/labels", 200),
            ("POST", r"statuses/([0-9a-f]{40})", self._status, "/repos/{owner}/{repo}/statuses/{sha}", 201),
        ]
        for verb, pattern, fn, template, status in routes:
            mm = re.fullmatch(pattern, rest)
            if verb == method and mm and "issues" in pattern and int(mm.group(1)) not in self.pulls[repo]:
                return 404, {}, {"message": "Not Found", "documentation_url": "https://docs.github.com"}, None
            if verb == method and mm:
                with self._lock:
                    self._who = who
                    return fn(repo, template, status, query, data, *mm.groups())
        return 404, {}, {"message": "Not Found", "documentation_url": "https://docs.github.com"}, None

    def _create_pull(self, repo, template, status, query, data):
        owner, _, branch = data["head"].rpartition(":")
        owner = owner or repo.split("/")[0]
        source = next((path for name, path in self.repos.items() if name.split("/")[0] == owner), None)
        if source is None or data.get("base") != "main":
            return 422, {}, {"message": "Validation Failed", "documentation_url": "https://docs.github.com"}, None
        try:
            sha = _git("rev-parse", f"refs/heads/{branch}", cwd=source)
        except subprocess.CalledProcessError:
            return 422, {}, {"message": "Validation Failed: head branch does not exist",
                             "documentation_url": "https://docs.github.com"}, None
        n = len(self.pulls[repo]) + 1
        _git("fetch", "-q", str(source), f"+refs/heads/{branch}:refs/pull/{n}/head", cwd=self.repos[repo])
        self.pulls[repo][n] = {"title": data["title"], "body": data.get("body"), "head_ref": branch,
                               "head_sha": sha, "head_owner": owner, "closed": False, "labels": []}
        return status, {}, self._pull_json(repo, n), template

    def _list_pulls(self, repo, template, status, query, data):
        per = int(query.get("per_page", ["30"])[0])
        page = int(query.get("page", ["1"])[0])
        state = query.get("state", ["open"])[0]
        items = [self._pull_json(repo, n, simple=True) for n in sorted(self.pulls[repo])]
        items = [p for p in items if state == "all" or p["state"] == state]
        chunk = items[(page - 1) * per: page * per]
        headers = {}
        if page * per < len(items):
            headers["Link"] = f'<{self.url}/repos/{repo}/pulls?state={state}&per_page={per}&page={page + 1}>; rel="next"'
        return status, headers, chunk, template

    def _get_pull(self, repo, template, status, query, data, n):
        if int(n) not in self.pulls[repo]:
            return 404, {}, {"message": "Not Found", "documentation_url": "https://docs.github.com"}, None
        return status, {}, self._pull_json(repo, int(n)), template

    def _update_pull(self, repo, template, status, query, data, n):
        if data.get("state") == "closed":
            self.pulls[repo][int(n)]["closed"] = True
        return status, {}, self._pull_json(repo, int(n)), template

    def _comment(self, repo, template, status, query, data, n):
        self._counter += 1
        c = self._fake(template, "POST", status, {"id": self._counter, "body": data["body"],
                                                  "user": {"login": self._who[0]}, "author_association": self._who[1]})
        self.comments.setdefault((repo, int(n)), []).append(c)
        return status, {}, c, template

    def _comments(self, repo, template, status, query, data, n):
        return status, {}, self.comments.get((repo, int(n)), []), template

    def _labels(self, repo, template, status, query, data, n):
        p = self.pulls[repo][int(n)]
        p["labels"] = sorted(set(p["labels"]) | set(data["labels"]))
        label = self.faker.resolve({"$ref": "#/components/schemas/label"})
        return status, {}, [merge(self.faker.make(label), {"name": lb}) for lb in p["labels"]], template

    def _status(self, repo, template, status, query, data, sha):
        s = self._fake(template, "POST", status, {"state": data["state"], "context": data.get("context", "default"),
                                                  "description": data.get("description")})
        self.statuses.setdefault(sha, []).append(s)
        return status, {}, s, template

    # -- validation against the description ----------------------------------------
    def _oreq(self, method, path, query_string, headers, body):
        url = f"https://api.github.com{path}" + (f"?{query_string}" if query_string else "")
        req = requests.Request(method, url, headers={k: v for k, v in headers.items()
                                                     if k.lower() in ("authorization", "accept", "content-type")},
                               data=body or None).prepare()
        return RequestsOpenAPIRequest(req)

    def validate_request(self, method, path, query_string, headers, body):
        try:
            self.api.validate_request(self._oreq(method, path, query_string, headers, body))
        except Exception as exc:  # openapi-core raises many types; each is a finding
            self.errors.append(f"request {method} {path}: {type(exc).__name__}: {exc}")

    def validate(self, method, path, query_string, headers, body, status, resp_headers, resp_body):
        oreq = self._oreq(method, path, query_string, headers, body)
        resp = requests.Response()
        resp.status_code = status
        resp.headers.update({"Content-Type": "application/json", **resp_headers})
        resp._content = json.dumps(resp_body).encode()
        try:
            self.api.validate_response(oreq, RequestsOpenAPIResponse(resp))
        except Exception as exc:
            if type(exc).__name__ == "ResponseNotFound" and status >= 400:
                return  # GitHub answers 401/404/... on every path; the description lists only some
            self.errors.append(f"response {status} to {method} {path}: {type(exc).__name__}: {str(exc)[:500]}")

    def __enter__(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self):
                parts = urlsplit(self.path)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = dict(self.headers.items())
                server.validate_request(self.command, parts.path, parts.query, headers, body)
                try:
                    status, rheaders, payload, template = server.handle(
                        self.command, parts.path, parse_qs(parts.query), headers, body)
                except Exception as exc:  # a bug in this server shows as a 500 and a recorded error
                    server.errors.append(f"server error on {self.command} {parts.path}: {exc!r}")
                    status, rheaders, payload, template = 500, {}, {"message": "server error"}, None
                server.log.append((self.command, parts.path, status))
                if template is not None or status < 500:
                    server.validate(self.command, parts.path, parts.query, headers, body, status, rheaders, payload)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in rheaders.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = _serve

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def fault(method: str, path: str, status: int, times: int = 1, headers=None, body=None) -> dict:
    return {"method": method, "path": path, "status": status, "times": times, "headers": headers or {},
            "body": body or {"message": "injected", "documentation_url": "https://docs.github.com"}}


def wait(seconds: float) -> None:
    time.sleep(seconds)
