"""The supervisor classifies a job's death from the tail of its output.  stdout and stderr arrive as
separate streams; a traceback written to stderr in pieces must stay one line in that tail even when the job
prints a progress line on stdout between the pieces (the CI run that showed "ValueErrorstep 3")."""

from __future__ import annotations

from gpuclinic.supervise.procs import OutputPump

OUT, ERR = 1, 2


def test_a_line_written_in_pieces_stays_whole_between_streams() -> None:
    pump = OutputPump(None, echo=False)
    pump.feed(b"ValueError", ERR)
    pump.feed(b"step 3\n", OUT)
    pump.feed(b": loss is NaN\n", ERR)
    lines = pump.tail_text().splitlines()
    assert "ValueError: loss is NaN" in lines and "step 3" in lines


def test_an_unfinished_last_line_is_in_the_tail() -> None:
    pump = OutputPump(None, echo=False)
    pump.feed(b"epoch 1\n", OUT)
    pump.feed(b"RuntimeError: CUDA error: an illegal memory access", ERR)  # killed mid-line
    assert pump.tail_text().splitlines()[-1] == "RuntimeError: CUDA error: an illegal memory access"


def test_a_progress_bar_without_newlines_is_kept_and_the_tail_is_capped() -> None:
    pump = OutputPump(None, echo=False, tail_bytes=4096)
    for i in range(2000):
        pump.feed(f"\r{i:5d}/2000 [=====>    ]".encode(), OUT)
    text = pump.tail_text()
    assert len(text.encode()) <= 4096 and "1999/2000" in text
