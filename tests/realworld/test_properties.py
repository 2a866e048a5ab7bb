"""The parsers added for real-world inputs never raise on arbitrary text (they only say what they found)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuclinic.errors import InputError
from gpuclinic.sources import smi_nvlink, smi_topo
from gpuclinic.sources.evidence import snapshot_from_text, unquote

_LINES = st.lists(
    st.one_of(
        st.text(max_size=40),
        st.sampled_from(
            [
                "GPU 0: Tesla V100 (UUID: GPU-1)",
                "         Link 0: <inactive>",
                "\t Link 1: 25.781 GB/s",
                "\t Link 2: Replay Errors: 9",
                "\tGPU0\tGPU1\tCPU Affinity",
                "GPU0\t X \tNV4\t0-7",
                "GPU1\tNV4\t X \t0-7",
                "> | NVIDIA-SMI 550.54.14  Driver Version: 550.54.14  CUDA Version: 12.4 |",
                '<nvidia_smi_log><driver_version>535</driver_version><gpu id="0:1:0.0">',
            ]
        ),
    ),
    max_size=12,
).map("\n".join)


@settings(max_examples=150, deadline=None)
@given(_LINES)
def test_new_parsers_total(text: str) -> None:
    smi_nvlink.parse(text)
    smi_topo.parse(text).notes()
    u = unquote(text)
    assert len(u) <= len(text)
    if ">" not in text:
        assert u is text
    try:
        snapshot_from_text(text, "p")
    except InputError as e:
        assert "\n" not in str(e)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 17), st.sampled_from(["<inactive>", "25.781 GB/s", "Replay Errors: 3"])),
        min_size=1,
        max_size=18,
    )
)
def test_nvlink_links_round_trip(links: list[tuple[int, str]]) -> None:
    text = "GPU 2: NVIDIA H100 (UUID: GPU-abc)\n" + "".join(f"\t Link {k}: {v}\n" for k, v in links)
    (g,) = smi_nvlink.parse(text).gpus
    assert g.index == 2 and g.uuid == "GPU-abc"
    assert sorted({k for k, _ in links}) == sorted(link.link for link in g.nvlinks)
    for k, v in links:
        link = next(x for x in g.nvlinks if x.link == k)
        if v == "Replay Errors: 3":
            assert link.replay_errors == 3
