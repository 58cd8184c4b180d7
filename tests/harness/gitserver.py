"""A git server on loopback for GitOps tests: bare repositories served over git's smart HTTP protocol.

Why smart HTTP and not a file:// URL or the dumb protocol: Flux's source-controller clones with go-git
over http(s) or ssh only, and go-git does not speak the dumb HTTP protocol. `git http-backend` (shipped
with git) is the server side of smart HTTP as a CGI program, so a few lines of `http.server` that turn a
request into its CGI environment make a real git server, bound to 127.0.0.1 only.

`GitServer(root).start()` serves every bare repository under `root/repos`; `.url` is the one called
`repo` (`GitServer(root, repo="fleet")`). `.push(files, message)` commits a set of files to `main` from
a work tree and pushes it (over the filesystem: the bare repository is local, and the server's side
under test is what Flux fetches); it returns the commit's SHA, which is what a GitRepository's
artifact revision names (`main@sha1:<sha>`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

#: Committer and author of every commit the tests push (git refuses to commit without one).
IDENTITY = {
    "GIT_AUTHOR_NAME": "kappaflow tests",
    "GIT_AUTHOR_EMAIL": "tests@kappaflow.invalid",
    "GIT_COMMITTER_NAME": "kappaflow tests",
    "GIT_COMMITTER_EMAIL": "tests@kappaflow.invalid",
}


def _git(*args: str, cwd: Path) -> str:
    env = {**os.environ, **IDENTITY, "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0"}
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {cwd}: {done.stderr.strip()}")
    return done.stdout.strip()


class _Handler(BaseHTTPRequestHandler):
    """One request -> one `git http-backend` run (CGI/1.1), its headers and body relayed back."""

    server: _Server

    def do_GET(self) -> None:
        self._cgi()

    def do_POST(self) -> None:
        self._cgi()

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _cgi(self) -> None:
        path, _, query = self.path.partition("?")
        body = self._body() if self.command == "POST" else b""
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(self.server.repos),
            "GIT_HTTP_EXPORT_ALL": "1",
            "GATEWAY_INTERFACE": "CGI/1.1",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "REMOTE_ADDR": self.client_address[0],
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
        }
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        if self.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        done = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True, check=False)
        head, _, payload = done.stdout.partition(b"\r\n\r\n")
        if not _:
            head, _, payload = done.stdout.partition(b"\n\n")
        status, headers = 200, []
        for line in head.decode("latin-1").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.split()[0])
            elif name:
                headers.append((name, value.strip()))
        if done.returncode != 0 and not head:
            status, payload = 500, done.stderr
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        with self.server.log_path.open("a") as log:
            log.write(f"{self.address_string()} {format % args}\n")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    repos: Path
    log_path: Path


class GitServer:
    """Bare repositories under `root/repos`, served at `http://127.0.0.1:<port>/<repo>.git`."""

    def __init__(self, root: Path | str, repo: str = "fleet", branch: str = "main") -> None:
        self.root = Path(root).resolve()
        self.repo = repo
        self.branch = branch
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def bare(self) -> Path:
        return self.root / "repos" / f"{self.repo}.git"

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("the git server is not started")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/{self.repo}.git"

    def start(self) -> GitServer:
        if not self.bare.exists():
            self.bare.mkdir(parents=True)
            _git("init", "--quiet", "--bare", f"--initial-branch={self.branch}", cwd=self.bare)
            _git("config", "http.receivepack", "true", cwd=self.bare)
        httpd = _Server(("127.0.0.1", 0), _Handler)
        httpd.repos = self.root / "repos"
        httpd.log_path = self.root / "http.log"
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, name="git-http", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> GitServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def push(self, files: dict[str, str], message: str, replace: bool = False) -> str:
        """Commit `files` (path relative to the repository root -> text) on top of the branch and push.

        `replace=True` makes the commit hold exactly `files` (everything else is removed). Returns the
        new commit's SHA."""
        work = self.root / "work" / self.repo
        if not work.exists():
            work.parent.mkdir(parents=True, exist_ok=True)
            _git("clone", "--quiet", str(self.bare), str(work), cwd=work.parent)
            _git("checkout", "--quiet", "-B", self.branch, cwd=work)
        if replace:
            for entry in work.iterdir():
                if entry.name != ".git":
                    shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        for rel, text in files.items():
            target = work / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        _git("add", "--all", ".", cwd=work)
        _git("commit", "--quiet", "--allow-empty", "-m", message, cwd=work)
        _git("push", "--quiet", "origin", f"HEAD:refs/heads/{self.branch}", cwd=work)
        return _git("rev-parse", "HEAD", cwd=work)

    def push_dir(self, directory: Path | str, message: str, prefix: str = "") -> str:
        """Commit the content of `directory` (its text files, under `prefix`) as the whole tree."""
        base = Path(directory)
        files = {
            str(Path(prefix) / p.relative_to(base)): p.read_text()
            for p in sorted(base.rglob("*"))
            if p.is_file()
        }
        return self.push(files, message, replace=True)
