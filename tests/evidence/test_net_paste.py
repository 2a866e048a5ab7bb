"""Pasted ping / mtr / iperf3 summaries and transfer meters are read as network facts and judged with the
thresholds `gpuclinic net` uses (knowledge/data/network_thresholds.json), as the same codes: loss at the
destination is network.lossy, a high average RTT network.high_latency, a slow iperf3 link or a crawling
transfer network.slow_link.  Healthy figures stay healthy."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from gpuclinic.checks._netpaste import net_threshold
from gpuclinic.diagnose import diagnose
from gpuclinic.explain import explain_text
from gpuclinic.sources import evidence, net_paste

PING = (
    "--- huggingface.co ping statistics ---\n"
    "10 packets transmitted, 7 received, 30% packet loss, time 9012ms\n"
    "rtt min/avg/max/mdev = 1.123/1.456/2.001/0.210 ms\n"
)
MAC_PING = (
    "--- github.com ping statistics ---\n"
    "20 packets transmitted, 20 packets received, 0.0% packet loss\n"
    "round-trip min/avg/max/stddev = 231.1/245.2/270.9/9.8 ms\n"
)
WIN_PING = (
    "Ping statistics for 140.82.112.3:\n"
    "    Packets: Sent = 4, Received = 3, Lost = 1 (25% loss),\n"
    "Approximate round trip times in milli-seconds:\n"
    "    Minimum = 20ms, Maximum = 25ms, Average = 22ms\n"
)
ICMP_DROPPED = (
    "--- github.com ping statistics ---\n4 packets transmitted, 0 received, 100% packet loss, time 3071ms\n"
)
MTR_HEAD = "HOST: box                         Loss%   Snt   Last   Avg  Best  Wrst StDev\n"
IPERF_P4 = (
    "[  5]   0.00-10.00  sec   600 MBytes   503 Mbits/sec  120             sender\n"
    "[  5]   0.00-10.00  sec   598 MBytes   502 Mbits/sec                  receiver\n"
    "[SUM]   0.00-10.00  sec  2.20 GBytes  1.89 Gbits/sec  480             sender\n"
    "[SUM]   0.00-10.00  sec  2.19 GBytes  1.88 Gbits/sec                  receiver\n"
)
IPERF_UDP = (
    "[  5]   0.00-10.00  sec  1.25 MBytes  1.05 Mbits/sec  0.000 ms  0/906 (0%)  sender\n"
    "[  5]   0.00-10.04  sec  1.25 MBytes  1.05 Mbits/sec  0.021 ms  0/906 (0%)  receiver\n"
)
CURL_CRAWL = (
    "  % Total    % Received % Xferd  Average Speed   Time    Time     Time  Current\n"
    "                                 Dload  Upload   Total   Spent    Left  Speed\n"
    "  3 4970M    3  150M    0     0   45k      0 31:25:01  0:56:54 30:28:07 44.1k\n"
)
PIP_SMALL = "     ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━ 858.2/858.2 kB 12.8 kB/s eta 0:00:00\n"
PIP_BIG = "   ━━━━━━━━━━━━╸━━━━━━━━━━━━━━━━━━━━━━━━━━ 250.3/780.5 MB 310.2 kB/s eta 0:28:30\n"
WGET = "2024-05-01 10:00:00 (412 KB/s) - 'model.bin' saved [524288000/524288000]\n"


def _codes(text: str) -> dict[str, str]:
    return {f.code: f.severity.label for f in explain_text(text).findings}


@pytest.mark.parametrize(
    ("text", "codes"),
    [
        (PING, {"network.lossy"}),
        (MAC_PING, {"network.high_latency"}),
        (WIN_PING, {"network.lossy"}),
        (WIN_PING.replace("(25% loss)", "(25.00% loss)").replace("= 22ms", "= 322.00ms"),
         {"network.lossy", "network.high_latency"}),  # decimals (ESP8266Ping's Windows-style output)
        (ICMP_DROPPED, set()),  # github.com drops ICMP: 100 % loss is not a lossy path
        (IPERF_P4, set()),  # the [SUM] receiver line (1.88 Gbit/s) counts, not one stream's
        (IPERF_UDP, set()),  # UDP's 1.05 Mbit/s is the rate asked for (-b), not the link's
        (IPERF_UDP.replace("0/906 (0%)  receiver", "23/906 (2.5%)  receiver"), {"network.lossy"}),
        (CURL_CRAWL, {"network.slow_link"}),
        ("Receiving objects:  12% (1234/10000), 5.00 MiB | 35.00 KiB/s\n", {"network.slow_link"}),
        ("Receiving objects: 100% (54/54), 120.50 KiB | 35.00 KiB/s, done.\n", set()),  # a tiny repo
        ("  Downloading torch-1.7.0-cp36-cp36m-win_amd64.whl (735.4 MB)\n"
         "     |████████████████████████████████| 735.4 MB 14 kB/s\n", {"network.slow_link"}),
        ("--- 8.8.8.8 ping statistics ---\n4 packets transmitted, 4 packets received, 0% packet loss\n"
         "round-trip min/avg/max = 301.2/305.5/310.0 ms\n", {"network.high_latency"}),  # busybox
        ("model.safetensors:   0%|  | 57.5k/4.98G [00:00<95:05:17, 93.9kB/s]\n", set()),  # its first second
        ("model.safetensors:   0%|  | 4.50M/4.98G [01:30<40:05:17, 50.0kB/s]\n", {"network.slow_link"}),
        (PIP_SMALL, set()),  # under 1 MB moved: the rate is connection setup
        (PIP_BIG, {"network.slow_link"}),
        (WGET, {"network.slow_link"}),
        ("Download: 45.20 Mbit/s\nUpload: 10.00 Mbit/s\n", {"network.slow_link"}),  # speedtest-cli
        ("   Download:   268.65 Mbps (data used: 359.6 MB)\nPacket Loss:     2.5%\n", {"network.lossy"}),
        ("   Download:   268.65 Mbps (data used: 359.6 MB)\nPacket Loss:     0.0%\n", set()),
    ],
)
def test_pasted_figures_give_nets_codes(text: str, codes: set[str]) -> None:
    got = _codes(text)
    assert {c for c, sev in got.items() if sev in ("warning", "critical")} == codes, got


def test_mtr_judges_the_last_hop_not_a_middle_one() -> None:
    middle = MTR_HEAD + (
        "  1.|-- 10.0.0.1                   0.0%    10    0.3   0.3   0.2   0.4   0.0\n"
        "  2.|-- ???                       100.0    10    0.0   0.0   0.0   0.0   0.0\n"
        "  3.|-- 72.14.1.1                 60.0%    10   10.1  10.3  10.0  11.0   0.3\n"
        "  4.|-- huggingface.co             0.0%    10   12.0  12.1  11.9  12.4   0.1\n"
    )
    assert not [c for c, s in _codes(middle).items() if s != "info"]
    asn = middle.replace("|-- huggingface.co ", "|-- AS13335 huggingface.co")  # mtr -z
    assert not [c for c, s in _codes(asn).items() if s != "info"]
    assert net_paste.read(asn.splitlines())[0][0]["target"] == "huggingface.co"
    last = middle.replace("huggingface.co             0.0%", "huggingface.co            12.0%")
    f = next(f for f in explain_text(last).findings if f.code == "network.lossy")
    assert "huggingface.co" in f.title and "12.0%" in f.evidence[0]


def test_thresholds_come_from_knowledge_data() -> None:
    """The pasted ping at exactly the high-latency threshold is flagged, one below it is not."""
    limit = net_threshold("high_latency_ms")
    at = MAC_PING.replace("/245.2/", f"/{limit:g}/")
    below = MAC_PING.replace("/245.2/", f"/{limit - 1:g}/")
    assert "network.high_latency" in _codes(at)
    assert "network.high_latency" not in _codes(below)


def test_evidence_quotes_the_pasted_line() -> None:
    f = next(f for f in explain_text("noise\n" + PING).findings if f.code == "network.lossy")
    assert "30% packet loss" in f.evidence[0] and "(line 3)" in f.evidence[0]


def test_doctor_from_reads_the_paste_too(tmp_path: Path) -> None:
    p = tmp_path / "ping.txt"
    p.write_text(PING, encoding="utf-8")
    found = {f.code for f in diagnose(evidence.load_evidence([str(p)])).findings}
    assert "network.lossy" in found


def test_prose_with_the_words_is_not_read() -> None:
    figs, used = net_paste.read(["the packet loss was bad and bits/sec were low, Loss% too"])
    assert figs == [] and used == set()


def test_a_line_without_a_key_literal_is_not_visited() -> None:
    figs, _ = net_paste.read(PING.splitlines(), where=[0])  # the summary's line is not in ``where``
    assert figs == []


def test_each_hub_file_keeps_its_own_last_rate() -> None:
    """A slow shard is not hidden by a small file's bar printed after it."""
    text = (
        "model-00001-of-00002.safetensors:  40%|████      | 2.00G/4.98G [30:00<45:00, 600kB/s]\n"
        "config.json: 100%|██████████| 1.20k/1.20k [00:00<00:00, 9.00kB/s]\n"
    )
    f = next(f for f in explain_text(text).findings if f.code == "network.slow_link")
    assert "model-00001-of-00002" in f.evidence[0] and len(f.evidence) == 1


def test_a_big_log_reaches_the_reader_through_the_needle_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past segments.BIG lines only the lines holding a needle are visited: the keys are among them."""
    filler = "".join(f"step {i} loss 0.{i % 97:02d}\n" for i in range(3000))
    text = filler + "--- hf.co ping statistics ---\n" + PING.split("\n", 1)[1] + filler + CURL_CRAWL
    seen: list[int] = []
    real = net_paste.read

    def spy(lines: list[str], where: Iterable[int] | None = None) -> tuple[list[dict[str, Any]], set[int]]:
        assert where is not None  # the big-input path: only the needle scan's hit lines
        seen.extend(where)
        return real(lines, where)

    monkeypatch.setattr(net_paste, "read", spy)
    found = _codes(text)
    assert 0 < len(seen) < 20, len(seen)
    assert found.get("network.lossy") == "warning" and found.get("network.slow_link") == "warning", found
