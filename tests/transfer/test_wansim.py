"""The simulator itself must behave like the servers it stands in for, or every other test lies."""

from __future__ import annotations

import time

import httpx

from gpuclinic.transfer.wansim import Knobs, WanSim, git_blob_sha1, parse_size
from gpuclinic.transfer.wansim_link import _parse_range

from .conftest import MiB, blob


def test_range_head_etag_if_range(sim: WanSim) -> None:
    data, sha = blob(100_000)
    url = sim.add_file("f.bin", data)
    with httpx.Client() as c:
        r = c.get(url, headers={"Range": "bytes=10-19"})
        assert r.status_code == 206 and r.content == data[10:20]
        assert r.headers["content-range"] == f"bytes 10-19/{len(data)}"
        etag = r.headers["etag"]
        assert etag == f'"{sha}"'
        h = c.head(url)
        assert h.status_code == 200 and h.headers["content-length"] == str(len(data)) and h.content == b""
        assert c.get(url, headers={"Range": "bytes=99990-"}).content == data[99990:]
        assert c.get(url, headers={"Range": "bytes=-5"}).content == data[-5:]
        # If-Range with a stale validator: the whole object, 200
        r = c.get(url, headers={"Range": "bytes=10-19", "If-Range": '"old"'})
        assert r.status_code == 200 and r.content == data
        r = c.get(url, headers={"Range": "bytes=10-19", "If-Range": etag})
        assert r.status_code == 206
        assert c.get(url, headers={"Range": "bytes=200000-"}).status_code == 416
        assert c.get(sim.base_url + "/files/missing").status_code == 404
    assert sim.served("f.bin") >= len(data)


def test_per_connection_rate_cap_is_steady() -> None:
    # Load on the box can only slow a transfer down, so the assertions are the ones a cap
    # guarantees whatever the CPU does: never ahead of rate * elapsed (plus two pacing blocks),
    # hence at least (size - blocks) / rate in total, on one connection, every byte once.
    rate = 4 * MiB
    data, _ = blob(MiB)
    with WanSim(Knobs(rate_per_conn=rate)) as s:
        url = s.add_file("f", data)
        got = bytearray()
        ahead = []
        t0 = time.monotonic()
        with httpx.stream("GET", url) as r:
            for chunk in r.iter_bytes():
                got += chunk
                allowed = 2 * (rate / 128) + rate * (time.monotonic() - t0)
                if len(got) > allowed:
                    ahead.append((len(got), allowed))
        dt = time.monotonic() - t0
        assert bytes(got) == data
        assert ahead == []
        assert dt >= (len(data) - 2 * rate / 128) / rate
    # counters read once the server loop stopped: the client can see the last block a moment
    # before the server's bookkeeping line after write() runs
    assert s.stats.max_active == 1 and s.served("f") == len(data)
    assert s.stats.last_byte - s.stats.first_byte >= (len(data) - 2 * rate / 128) / rate - 0.01


def test_injected_429_has_retry_after_and_rst_drop() -> None:
    data, _ = blob(2 * MiB)
    with WanSim(Knobs(fail_next=[429], retry_after=2)) as s:
        url = s.add_file("f", data)
        r = httpx.get(url)
        assert r.status_code == 429 and r.headers["retry-after"] == "2"
        assert httpx.get(url).status_code == 200
        s.knobs.drop_at_bytes = [s.stats.total_body + MiB]
        try:
            httpx.get(url)
            raise AssertionError("expected a reset")
        except httpx.ReadError as e:  # ECONNRESET, what huggingface_hub 2.4 does not retry
            assert "reset" in str(e).lower() or "104" in str(e)
        assert s.stats.drops == 1


def test_hub_endpoints_errors_and_signed_redirect() -> None:
    big, sha = blob(200_000, 5)
    with WanSim(Knobs(cdn_ttl=60), token="hf_" + "x" * 30) as s:
        spec = s.add_repo("org/m", {"config.json": b"{}", "w.bin": big})
        s.add_repo("org/gated", {"a": b"1"}, gated=True)
        s.add_repo("org/priv", {"a": b"1"}, private=True)
        s.add_repo("org/ds", {"d.csv": b"a,b\n"}, repo_type="dataset")
        with httpx.Client() as c:
            info = c.get(f"{s.base_url}/api/models/org/m/revision/main?blobs=true").json()
            assert info["sha"] == spec.commit
            lfs = {e["rfilename"]: e for e in info["siblings"]}["w.bin"]["lfs"]
            assert lfs["sha256"] == sha
            r = c.head(f"{s.base_url}/org/m/resolve/main/w.bin")
            assert r.status_code == 302 and r.headers["x-repo-commit"] == spec.commit
            assert r.headers["x-linked-etag"] == f'"{sha}"' and r.headers["x-linked-size"] == str(len(big))
            loc = r.headers["location"]
            assert loc.startswith(s.cdn_url)
            assert c.get(loc).content == big
            assert c.get(loc.replace("Signature=", "Signature=0")).status_code == 403
            small = c.get(f"{s.base_url}/org/m/resolve/main/config.json")
            assert small.headers["etag"] == f'"{git_blob_sha1(b"{}")}"'
            r = c.get(f"{s.base_url}/org/m/resolve/main/nope")
            assert r.status_code == 404 and r.headers["x-error-code"] == "EntryNotFound"
            r = c.get(f"{s.base_url}/api/models/org/m/revision/nope")
            assert r.headers["x-error-code"] == "RevisionNotFound"
            r = c.get(f"{s.base_url}/api/models/org/gated/revision/main")
            assert r.status_code == 401 and r.headers["x-error-code"] == "GatedRepo"
            r = c.get(f"{s.base_url}/api/models/org/priv/revision/main")
            assert r.status_code == 401 and r.headers["x-error-code"] == "RepoNotFound"
            auth = {"Authorization": f"Bearer {s.token}"}
            assert c.get(f"{s.base_url}/api/models/org/priv/revision/main", headers=auth).status_code == 200
            assert c.get(f"{s.base_url}/api/datasets/org/ds/revision/main").status_code == 200
            assert c.get(f"{s.base_url}/datasets/org/ds/resolve/main/d.csv").content == b"a,b\n"
            tree = c.get(f"{s.base_url}/api/models/org/m/tree/main?recursive=true").json()
            assert {e["path"] for e in tree if e["type"] == "file"} == {"config.json", "w.bin"}
        s.knobs.cdn_ttl = -1
        loc = httpx.head(f"{s.base_url}/org/m/resolve/main/w.bin").headers["location"]
        assert httpx.get(loc).status_code == 403  # expired signed URL


def test_parse_helpers() -> None:
    assert parse_size("4M") == 4 * MiB and parse_size("200MiB") == 200 * MiB and parse_size("10") == 10
    assert _parse_range("bytes=0-0", 10) == (0, 0)
    assert _parse_range("bytes=5-100", 10) == (5, 9)
    assert _parse_range("bytes=10-", 10) == (None, None)
    assert _parse_range("items=0-1", 10) == (None, None)


def test_a_paced_body_stops_when_the_client_hangs_up() -> None:
    """Issue 14: a block that comes due after the client closed is neither sent nor counted as served
    (it was counted, one block per connection, which bench/resume_kill9 reported as lost bytes)."""
    data, _ = blob(4 * MiB, 41)
    with WanSim(Knobs(rate_per_conn=MiB)) as s:
        url = s.add_file("f.bin", data)
        got = 0
        with httpx.Client() as c, c.stream("GET", url) as r:
            for chunk in r.iter_raw():
                got += len(chunk)
                if got >= 256 * 1024:
                    break
        time.sleep(0.3)  # ~40 more 8 KiB blocks would have come due at 1 MiB/s
        served, late = s.served("f.bin"), s.stats.after_close
        time.sleep(0.1)
        assert got <= served <= got + 64 * 1024, (got, served)
        assert s.served("f.bin") == served and 0 < late <= 8 * 1024
