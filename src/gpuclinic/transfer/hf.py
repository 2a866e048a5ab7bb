"""``gpuclinic get hf``: a Hub repo into the standard Hugging Face cache, with the fast engine.

Why: huggingface_hub over plain HTTP uses one stream per file, cannot resume across processes
(since 1.18) and checks only sizes.  We pin the commit through the Hub API, fetch every file with
parallel ranged connections and resume, verify LFS files by sha256 (their etag) and small files
by their git blob sha1, and write ``blobs/<etag>``, relative ``snapshots/<commit>/<path>``
symlinks and ``refs/<revision>`` exactly as huggingface_hub does, so
``from_pretrained(..., local_files_only=True)`` and ``HF_HUB_OFFLINE=1`` find the files.

We never write ``trees/<commit>.json``: with include/exclude filters it would declare files we did
not fetch, and huggingface_hub treats a present tree file as the complete list.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

from gpuclinic.errors import GpuclinicError, InputError
from gpuclinic.transfer.engine import DownloadError, Engine, EngineOptions, FileResult, FileSpec
from gpuclinic.transfer.engine_jobs import _origin
from gpuclinic.transfer.neterr import net_cause
from gpuclinic.transfer.redact import add_secret, redact, safe_url

DEFAULT_ENDPOINT = "https://huggingface.co"
_REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")
_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_ETAG_RE = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")


@dataclass
class RepoFile:
    path: str
    size: int
    etag: str  # blob name: lfs sha256 or git blob sha1
    lfs: bool


@dataclass
class Summary:
    repo_id: str
    commit: str
    snapshot_dir: Path
    results: list[FileResult] = field(default_factory=list)
    seconds: float = 0.0

    def json_lines(self) -> list[str]:
        lines = [json.dumps(r.to_dict(), sort_keys=True) for r in self.results]
        total = {
            "repo": self.repo_id,
            "commit": self.commit,
            "snapshot": str(self.snapshot_dir),
            "files": len(self.results),
            "bytes": sum(r.size for r in self.results),
            "downloaded": sum(r.downloaded for r in self.results),
            "seconds": round(self.seconds, 3),
            "status": "ok" if all(r.status != "failed" for r in self.results) else "failed",
        }
        return [*lines, json.dumps(total, sort_keys=True)]


# ---------------------------------------------------------------------- environment
def hf_endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def hf_home() -> Path:
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "huggingface"


def hub_cache(cache_dir: str | None = None) -> Path:
    for v in (cache_dir, os.environ.get("HF_HUB_CACHE"), os.environ.get("HUGGINGFACE_HUB_CACHE")):
        if v:
            return Path(v).expanduser()
    return hf_home() / "hub"


def hf_token() -> str | None:
    """HF_TOKEN, then the legacy variable, then the token file huggingface-cli login writes."""
    tok = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    if not tok:
        path = Path(os.environ.get("HF_TOKEN_PATH") or hf_home() / "token").expanduser()
        with contextlib.suppress(OSError):
            tok = path.read_text().strip() or None
    if tok:
        add_secret(tok)
    return tok


# ---------------------------------------------------------------------- validation
def parse_repo(repo: str) -> str:
    r = repo.strip()
    if r.lower().startswith("hf://"):
        r = r[5:]
    for prefix in ("models/", "datasets/"):
        if r.startswith(prefix):
            r = r[len(prefix) :]
    r = r.strip("/")
    if not _REPO_RE.match(r) or ".." in r:
        raise InputError(f"not a Hugging Face repo id: {redact(repo)!r} (expected ORG/NAME)")
    return r


def safe_repo_path(path: str) -> PurePosixPath:
    """Refuse repo file names that could land outside the snapshot directory."""
    bad = (
        not path
        or "\\" in path
        or "\x00" in path
        or path.startswith("/")
        or re.match(r"^[A-Za-z]:", path) is not None
        or any(part in ("", ".", "..") for part in path.split("/"))
    )
    if bad:
        raise DownloadError(f"refusing repo file name {path!r}: it would escape the target directory")
    return PurePosixPath(path)


def _check_revision(rev: str) -> str:
    if (
        not rev.strip()
        or rev != rev.strip()
        or rev.startswith("/")
        or "\\" in rev
        or any(p in ("", ".", "..") for p in rev.split("/"))
    ):
        raise InputError(f"invalid revision {rev!r}")
    return rev


# ---------------------------------------------------------------------- Hub API
def _hub_error(r: httpx.Response, repo_id: str, what: str) -> GpuclinicError:
    code = r.headers.get("x-error-code", "")
    msg = r.headers.get("x-error-message", "")
    endpoint = hf_endpoint()
    if code == "GatedRepo":
        return DownloadError(
            f"{repo_id} is gated: accept its terms at {endpoint}/{repo_id} and set HF_TOKEN "
            f"(HTTP {r.status_code})"
        )
    if code == "RevisionNotFound":
        return DownloadError(f"{repo_id}: revision not found ({what}; HTTP {r.status_code})")
    if code == "EntryNotFound":
        return DownloadError(f"{repo_id}: file not found: {what} (HTTP {r.status_code})")
    if r.status_code == 401 or code == "RepoNotFound":
        hint = (
            "check the name, or set HF_TOKEN if it is private" if r.status_code == 401 else "check the name"
        )
        return DownloadError(
            f"{repo_id}: repository not found or not accessible ({hint}; HTTP {r.status_code})"
        )
    if r.status_code == 403:
        return DownloadError(f"{repo_id}: access denied (HTTP 403{': ' + msg if msg else ''})")
    return DownloadError(
        f"{repo_id}: Hub request failed: HTTP {r.status_code} {r.reason_phrase} from {safe_url(str(r.url))}"
    )


def fetch_repo_info(
    client: httpx.Client, repo_id: str, revision: str, repo_type: str, headers: dict[str, str]
) -> tuple[str, list[RepoFile]]:
    """Pin ``revision`` to a commit and list its files (with sizes and etags)."""
    endpoint = hf_endpoint()
    url = f"{endpoint}/api/{repo_type}s/{repo_id}/revision/{quote(revision, safe='')}"
    r = _get(client, url, headers)
    if r.status_code != 200:
        raise _hub_error(r, repo_id, f"revision {revision}")
    try:
        info = r.json()
        commit = str(info["sha"])
        siblings = info.get("siblings") or []
    except (ValueError, KeyError, TypeError):
        raise DownloadError(
            f"{repo_id}: unexpected Hub API answer from {safe_url(url)} (is HF_ENDPOINT a Hub?)"
        ) from None
    if not _HEX40.match(commit):
        raise DownloadError(f"{repo_id}: Hub API returned an invalid commit id")
    files: list[RepoFile] = []
    need_tree = not siblings or any("size" not in s for s in siblings)
    if need_tree:
        files = _tree(client, repo_id, commit, repo_type, headers)
    else:
        for s in siblings:
            lfs = s.get("lfs") or None
            etag = (lfs or {}).get("sha256") or s.get("blobId") or ""
            files.append(RepoFile(str(s["rfilename"]), int(s["size"]), str(etag).lower(), bool(lfs)))
    for f in files:
        safe_repo_path(f.path)
        if not _ETAG_RE.match(f.etag):
            raise DownloadError(f"{repo_id}: Hub gave an unusable etag for {f.path!r}")
    return commit, files


def _tree(
    client: httpx.Client, repo_id: str, commit: str, repo_type: str, headers: dict[str, str]
) -> list[RepoFile]:
    url: str | None = f"{hf_endpoint()}/api/{repo_type}s/{repo_id}/tree/{commit}?recursive=true&expand=false"
    out: list[RepoFile] = []
    pages = 0
    while url and pages < 10000:
        r = _get(client, url, headers)
        if r.status_code != 200:
            raise _hub_error(r, repo_id, "file list")
        for e in r.json():
            if e.get("type") != "file":
                continue
            lfs = e.get("lfs") or None
            etag = (lfs or {}).get("oid") or e.get("oid") or ""
            out.append(RepoFile(str(e["path"]), int(e.get("size", 0)), str(etag).lower(), bool(lfs)))
        nxt = r.links.get("next", {}).get("url")
        url = nxt if nxt and _origin(nxt) == _origin(hf_endpoint()) else None
        pages += 1
    return out


def unreachable(e: BaseException) -> DownloadError:
    """One line that names the cause (DNS, connect, TLS, timeout) and where to look next."""
    endpoint = hf_endpoint()
    host = urlsplit(endpoint).hostname or endpoint
    cause = net_cause(e).describe(host)
    return DownloadError(
        f"cannot reach the Hub at {safe_url(endpoint)}: {cause}; run `gpuclinic net` to see "
        "which endpoints and mirrors work here, then set HF_ENDPOINT to a reachable one"
    )


def _get(client: httpx.Client, url: str, headers: dict[str, str]) -> httpx.Response:
    last: BaseException | None = None
    for attempt in range(5):
        try:
            r = client.get(url, headers=headers)
        except httpx.HTTPError as e:
            if net_cause(e).permanent:
                raise unreachable(e) from None  # no DNS, refused, bad TLS: a retry will not help
            last = e
            time.sleep(min(4.0, 0.3 * 2**attempt))
            continue
        if r.status_code in (429, 500, 502, 503, 504) and attempt < 4:
            ra = r.headers.get("retry-after", "")
            time.sleep(min(30.0, float(ra)) if ra.replace(".", "", 1).isdigit() else 0.5 * 2**attempt)
            continue
        return r
    if last is not None:
        raise unreachable(last)
    raise DownloadError(f"cannot reach the Hub at {safe_url(hf_endpoint())}: no answer")


# ---------------------------------------------------------------------- cache layout
def _select(files: list[RepoFile], include: list[str], exclude: list[str]) -> list[RepoFile]:
    def norm(p: str) -> str:
        return p + "*" if p.endswith("/") else p

    inc = [norm(p) for p in include]
    exc = [norm(p) for p in exclude]
    out = []
    for f in files:
        if inc and not any(fnmatch.fnmatch(f.path, p) for p in inc):
            continue
        if any(fnmatch.fnmatch(f.path, p) for p in exc):
            continue
        out.append(f)
    return out


def _inside(root: Path, target: Path) -> bool:
    try:
        target.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def _link(snapshot: Path, rel: PurePosixPath, blob: Path) -> None:
    """Create ``snapshot/rel`` -> relative path to ``blob``, refusing to follow planted symlinks."""
    dst = snapshot.joinpath(*rel.parts)
    parent = dst.parent
    # walk the parents: none may be a symlink (a planted link would redirect our write)
    cur = snapshot
    for part in rel.parts[:-1]:
        cur = cur / part
        if cur.is_symlink():
            raise DownloadError(f"refusing to write through a symlinked directory in the cache: {cur}")
    parent.mkdir(parents=True, exist_ok=True)
    if not _inside(snapshot, parent):
        raise DownloadError(f"refusing repo file name {str(rel)!r}: it would escape the target directory")
    target = os.path.relpath(blob, parent)
    if dst.is_symlink() and os.readlink(dst) == target:
        return
    tmp = parent / f".{dst.name}.gpuclinic-link"
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    os.symlink(target, tmp)
    os.replace(tmp, dst)


def _write_ref(repo_dir: Path, revision: str, commit: str) -> None:
    ref = repo_dir / "refs" / revision
    if not _inside(repo_dir / "refs", ref.parent if ref.parent.exists() else repo_dir / "refs"):
        raise InputError(f"invalid revision {revision!r}")
    ref.parent.mkdir(parents=True, exist_ok=True)
    tmp = ref.with_name(ref.name + ".gpuclinic-tmp")
    tmp.write_text(commit)
    os.replace(tmp, ref)


def _blob_ok(blob: Path, f: RepoFile) -> bool:
    try:
        return blob.is_file() and blob.stat().st_size == f.size
    except OSError:
        return False


# ---------------------------------------------------------------------- main entry
def download_repo(
    repo: str,
    *,
    revision: str | None = None,
    include: list[str] | None = None,
    exclude: list[str] | None = None,
    repo_type: str = "model",
    cache_dir: str | None = None,
    options: EngineOptions | None = None,
    quiet: bool = False,
) -> Summary:
    """Resolve, download and place a repo in the Hub cache; raises a one-line error on failure."""
    from gpuclinic.transfer.progress import ProgressDisplay

    t0 = time.monotonic()
    repo_id = parse_repo(repo)
    if repo_type not in ("model", "dataset"):
        raise InputError(f"unsupported repo type {repo_type!r}")
    rev = _check_revision("main" if revision is None else revision)  # --revision "" is a mistake, not main
    token = hf_token()
    endpoint = hf_endpoint()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    cache = hub_cache(cache_dir)
    repo_dir = cache / f"{repo_type}s--{repo_id.replace('/', '--')}"
    with httpx.Client(
        follow_redirects=False,
        trust_env=True,
        timeout=httpx.Timeout(20.0, connect=5.0),
        headers={"User-Agent": f"gpuclinic/{_version()}"},
    ) as client:
        try:
            commit, files = fetch_repo_info(client, repo_id, rev, repo_type, headers)
        except httpx.HTTPError as e:
            raise unreachable(e) from None
    wanted = _select(files, include or [], exclude or [])
    if not wanted:
        raise InputError(f"{repo_id}@{rev}: no file matches the include/exclude patterns")
    blobs = repo_dir / "blobs"
    snapshot = repo_dir / "snapshots" / commit
    try:
        blobs.mkdir(parents=True, exist_ok=True)
        snapshot.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(
            f"cannot create the Hub cache in {cache}: {e.strerror or e} (set --cache-dir or HF_HUB_CACHE)"
        ) from None
    with contextlib.suppress(OSError):
        tag = cache / "CACHEDIR.TAG"
        if not tag.exists():
            tag.write_text(
                "Signature: 8a477f597d28d172789f06886806bc55\n"
                "# This file is a cache directory tag created by gpuclinic.\n"
            )
    prefix = "datasets/" if repo_type == "dataset" else ""
    specs: list[FileSpec] = []
    present: list[FileResult] = []
    by_etag: dict[str, RepoFile] = {}
    for f in sorted(wanted, key=lambda x: -x.size):
        blob = blobs / f.etag
        if _blob_ok(blob, f):
            present.append(
                FileResult(str(blob), f.size, f.etag if f.lfs else None, 0.0, 0, f.size, "", "skipped")
            )
            continue
        if f.etag in by_etag:
            continue  # the same content under two names: download once
        by_etag[f.etag] = f
        url = f"{endpoint}/{prefix}{repo_id}/resolve/{commit}/{quote(f.path)}"
        specs.append(
            FileSpec(
                dest=blob,
                sources=[url],
                size=f.size,
                sha256=f.etag if f.lfs and len(f.etag) == 64 else None,
                git_sha1=f.etag if not f.lfs and len(f.etag) == 40 else None,
                label=f.path,
                headers=headers,
                auth_origins={_origin(endpoint)},
            )
        )
    results: list[FileResult] = []
    if specs:
        engine = Engine(options or EngineOptions())
        with ProgressDisplay(engine, quiet=quiet):
            results = engine.run(specs)
    failed = [r for r in results if r.status == "failed"]
    if failed:
        first = failed[0].error or "failed"
        more = f" (and {len(failed) - 1} more files)" if len(failed) > 1 else ""
        raise DownloadError(f"{repo_id}: {first}{more}; completed files are kept, rerun to resume")
    for f in wanted:
        blob = blobs / f.etag
        if not blob.is_file():
            raise DownloadError(f"{repo_id}: {f.path} is missing after download")
        _link(snapshot, safe_repo_path(f.path), blob)
    if not _HEX40.match(rev) or rev != commit:
        _write_ref(repo_dir, rev, commit)
    return Summary(repo_id, commit, snapshot, [*present, *results], time.monotonic() - t0)


def _version() -> str:
    from gpuclinic import __version__

    return __version__


def describe(files: list[RepoFile]) -> dict[str, Any]:
    return {"files": len(files), "bytes": sum(f.size for f in files)}
