"""The WAN simulator's Hugging Face Hub: repo metadata, tree listings, resolve redirects, a signed CDN.

Why a module of its own: ``gpuclinic get hf`` must be tested against the Hub's real behaviour
(gated and private repos and their error headers, revisions, ``?blobs=true``, paginated trees,
LFS files redirected to a CDN on another origin with expiring signed URLs), and all of it is
emulation logic apart from how bytes travel (wansim_link.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import math
import random
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from gpuclinic.transfer.wansim_link import Knobs, _Link


@dataclass
class RepoSpec:
    repo_id: str
    repo_type: str  # "model" | "dataset"
    files: dict[str, bytes]
    commit: str
    refs: dict[str, str]
    lfs: set[str]
    gated: bool = False
    private: bool = False
    sha256: dict[str, str] = field(default_factory=dict)  # path -> digest, computed once
    gitsha: dict[str, str] = field(default_factory=dict)


def git_blob_sha1(data: bytes) -> str:
    """The git object id of a blob: what the Hub uses as the etag of a non-LFS file."""
    h = hashlib.sha1(b"blob %d\0" % len(data))
    h.update(data)
    return h.hexdigest()


class _Hub(_Link):
    """The Hub endpoints (``/api/...``, ``.../resolve/...``) and the CDN listener's answers."""

    def __init__(self, knobs: Knobs | None, token: str | None) -> None:
        super().__init__(knobs)
        self.token = token
        self.repos: dict[tuple[str, str], RepoSpec] = {}
        self._blobs: dict[str, bytes] = {}  # sha256 -> data, served by the CDN
        self._secret = random.Random(self.knobs.seed).randbytes(16)

    def add_repo(
        self,
        repo_id: str,
        files: dict[str, bytes],
        *,
        repo_type: str = "model",
        lfs_min_size: int = 100_000,
        gated: bool = False,
        private: bool = False,
        commit: str | None = None,
        refs: dict[str, str] | None = None,
    ) -> RepoSpec:
        commit = commit or hashlib.sha1(repo_id.encode() + str(sorted(files)).encode()).hexdigest()
        lfs = {p for p, d in files.items() if len(d) >= lfs_min_size}
        spec = RepoSpec(
            repo_id, repo_type, dict(files), commit, refs or {"main": commit}, lfs, gated, private
        )
        self.repos[(repo_type, repo_id)] = spec
        for p, d in files.items():
            spec.sha256[p] = hashlib.sha256(d).hexdigest()
            spec.gitsha[p] = git_blob_sha1(d)
        for p in lfs:
            self._blobs[spec.sha256[p]] = files[p]
        return spec

    def expire_signed_urls(self) -> None:
        """Every signed CDN URL handed out so far answers 403 from now on (as if its time ran out),
        at an exact moment a test chooses rather than after a TTL raced against a busy CPU."""
        self._secret = random.Random(self._secret).randbytes(16)

    def _sign(self, sha: str, expires: int) -> str:
        """The signature of a CDN URL for blob ``sha`` valid until ``expires`` (epoch seconds)."""
        return hmac.new(self._secret, f"{sha}:{expires}".encode(), "sha256").hexdigest()[:32]

    async def _hub_error(
        self, writer: asyncio.StreamWriter, status: int, code: str, message: str, head: bool = False
    ) -> None:
        data = json.dumps({"error": message}).encode()
        h = {"Content-Type": "application/json", "X-Error-Code": code, "X-Error-Message": message}
        await self._send(writer, status, h, data, head_only=head)

    def _authorized(self, headers: dict[str, str]) -> bool:
        auth = headers.get("authorization", "")
        return bool(self.token) and hmac.compare_digest(auth, f"Bearer {self.token}")

    # ----------------------------------------------------------------- Hub
    def _find_repo(self, repo_type: str, rest: str) -> tuple[RepoSpec | None, str, str]:
        """Split ``org/name/<tail>`` into a known repo and the tail; unknown repos use two components."""
        segs = rest.split("/")
        for n in (2, 1):
            rid = "/".join(segs[:n])
            if (repo_type, rid) in self.repos:
                return self.repos[(repo_type, rid)], rid, "/".join(segs[n:])
        return None, "/".join(segs[:2]), "/".join(segs[2:])

    async def _check_access(
        self,
        spec: RepoSpec | None,
        rid: str,
        headers: dict[str, str],
        writer: asyncio.StreamWriter,
        head: bool,
    ) -> bool:
        if spec is None or (spec.private and not self._authorized(headers)):
            if self._authorized(headers):
                await self._hub_error(writer, 404, "RepoNotFound", "Repository not found", head)
            else:
                await self._hub_error(
                    writer, 401, "RepoNotFound", "Repository Not Found. Invalid username or password.", head
                )
            return False
        if spec.gated and not self._authorized(headers):
            msg = (
                f"Access to model {rid} is restricted. You must have access to it and be authenticated "
                "to access it. Please log in."
            )
            await self._hub_error(
                writer, 401 if "authorization" not in headers else 403, "GatedRepo", msg, head
            )
            return False
        return True

    def _commit_for(self, spec: RepoSpec, rev: str) -> str | None:
        if rev == spec.commit:
            return rev
        return spec.refs.get(rev)

    def _entry(self, spec: RepoSpec, p: str) -> dict[str, Any]:
        data = spec.files[p]
        e: dict[str, Any] = {"rfilename": p, "size": len(data), "blobId": spec.gitsha[p]}
        if p in spec.lfs:
            e["lfs"] = {"sha256": spec.sha256[p], "size": len(data), "pointerSize": 134}
        return e

    async def _api(
        self,
        method: str,
        path: str,
        query: dict[str, list[str]],
        headers: dict[str, str],
        writer: asyncio.StreamWriter,
    ) -> None:
        segs = path.split("/", 3)  # "", "api", "models", rest
        if len(segs) < 4 or segs[2] not in ("models", "datasets"):
            await self._hub_error(writer, 404, "NotFound", "Not Found")
            return
        repo_type = segs[2][:-1]
        spec, rid, tail = self._find_repo(repo_type, segs[3])
        if not await self._check_access(spec, rid, headers, writer, False):
            return
        assert spec is not None
        kind, _, rev = tail.partition("/")
        if kind == "" or kind == "revision":
            rev = unquote(rev) or "main"
            commit = self._commit_for(spec, rev)
            if commit is None:
                await self._hub_error(writer, 404, "RevisionNotFound", f"Invalid rev id: {rev}")
                return
            blobs = query.get("blobs", ["false"])[0] == "true" and not self.knobs.ignore_blobs
            sibs = [self._entry(spec, p) if blobs else {"rfilename": p} for p in sorted(spec.files)]
            info = {
                "id": rid,
                "modelId": rid,
                "sha": commit,
                "private": spec.private,
                "gated": spec.gated,
                "siblings": sibs,
            }
            await self._json(writer, 200, info)
            return
        if kind in ("tree", "treesize"):
            rev, _, sub = rev.partition("/")
            commit = self._commit_for(spec, unquote(rev))
            if commit is None:
                await self._hub_error(writer, 404, "RevisionNotFound", f"Invalid rev id: {rev}")
                return
            if kind == "treesize":
                await self._json(writer, 200, {"size": sum(len(d) for d in spec.files.values())})
                return
            out: list[dict[str, Any]] = []
            dirs: set[str] = set()
            for p in sorted(spec.files):
                if sub and not p.startswith(sub.rstrip("/") + "/"):
                    continue
                parts = p.split("/")
                for i in range(1, len(parts)):
                    d = "/".join(parts[:i])
                    if d not in dirs:
                        dirs.add(d)
                        out.append(
                            {
                                "type": "directory",
                                "oid": hashlib.sha1(d.encode()).hexdigest(),
                                "size": 0,
                                "path": d,
                            }
                        )
                e = self._entry(spec, p)
                item: dict[str, Any] = {"type": "file", "oid": e["blobId"], "size": e["size"], "path": p}
                if "lfs" in e:
                    item["lfs"] = {"oid": e["lfs"]["sha256"], "size": e["size"], "pointerSize": 134}
                out.append(item)
            start = int(query.get("cursor", ["0"])[0] or 0)
            page = out[start : start + self.knobs.tree_page]
            extra = {}
            if start + self.knobs.tree_page < len(out):
                nxt = (
                    f"{self.base_url}/api/{repo_type}s/{rid}/tree/{rev}?recursive=true&expand=false"
                    f"&cursor={start + self.knobs.tree_page}"
                )
                extra["Link"] = f'<{nxt}>; rel="next"'
            await self._json(writer, 200, page, extra)
            return
        await self._hub_error(writer, 404, "NotFound", "Not Found")

    async def _resolve(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        writer: asyncio.StreamWriter,
        conn: dict[str, Any],
    ) -> None:
        head = method == "HEAD"
        rest = path.lstrip("/")
        repo_type = "model"
        if rest.startswith("datasets/"):
            repo_type, rest = "dataset", rest[len("datasets/") :]
        if "/resolve/" not in rest:
            await self._hub_error(writer, 404, "NotFound", "Not Found", head)
            return
        spec, rid, tail = self._find_repo(repo_type, rest)
        if not tail.startswith("resolve/"):
            spec = None
        if not await self._check_access(spec, rid, headers, writer, head):
            return
        assert spec is not None
        rev, _, fpath = tail[len("resolve/") :].partition("/")
        commit = self._commit_for(spec, rev)
        if commit is None:
            await self._hub_error(writer, 404, "RevisionNotFound", f"Invalid rev id: {rev}", head)
            return
        data = spec.files.get(fpath)
        if data is None:
            h = {
                "X-Error-Code": "EntryNotFound",
                "X-Error-Message": "Entry not found",
                "X-Repo-Commit": commit,
            }
            await self._send(writer, 404, h, b'{"error":"Entry not found"}', head_only=head)
            return
        common = {"X-Repo-Commit": commit, "X-Linked-Size": str(len(data))}
        if fpath in spec.lfs:
            sha = spec.sha256[fpath]
            # rounded up: a signed URL lives at least cdn_ttl (int() gave a 1-s TTL anything from 0 to 1 s)
            expires = math.ceil(time.time() + self.knobs.cdn_ttl)
            sig = self._sign(sha, expires)
            loc = f"{self.cdn_url}/cdn/{sha}?Expires={expires}&Signature={sig}"
            h = {**common, "X-Linked-Etag": f'"{sha}"', "ETag": f'"{sha}"', "Location": loc}
            await self._send(writer, 302, h, b"", head_only=True, content_length=0)
            return
        etag = spec.gitsha[fpath]
        await self._serve_bytes(method, headers, writer, conn, data, etag, f"{rid}/{fpath}", common)

    async def _cdn(
        self,
        method: str,
        path: str,
        query: dict[str, list[str]],
        headers: dict[str, str],
        writer: asyncio.StreamWriter,
        conn: dict[str, Any],
    ) -> None:
        sha = path.removeprefix("/cdn/")
        data = self._blobs.get(sha)
        if data is None:
            await self._send(writer, 404, {}, b"NoSuchKey")
            return
        try:
            expires = int(query.get("Expires", ["0"])[0])
        except ValueError:
            expires = 0
        sig = self._sign(sha, expires)
        if not hmac.compare_digest(sig, query.get("Signature", [""])[0]) or expires < time.time():
            await self._send(
                writer,
                403,
                {"Content-Type": "application/xml"},
                b"<Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>",
            )
            return
        await self._serve_bytes(method, headers, writer, conn, data, sha, sha, {})
