"""``slurm.node_not_responding``: the node states and reasons Slurm writes when slurmctld loses a node's
slurmd (sinfo's ``*`` suffix, scontrol's ``NOT_RESPONDING`` flag or, before 21.08, ``DOWN*``, the ``Not
responding`` reason, slurmctld's log line), and what it must not take for one (a default partition's ``*``,
a node an admin set DOWN for another reason)."""

from __future__ import annotations

import pytest

from gpuclinic.knowledge.signatures import match

SIG = "slurm.node_not_responding"


@pytest.mark.parametrize(
    "text",
    [
        "   State=DOWN+DRAIN+NOT_RESPONDING ThreadsPerCore=2 TmpDisk=0 Weight=1\n",  # Slurm >= 21.08
        "   State=DOWN*+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A\n",  # Slurm 20
        "   State=IDLE* ThreadsPerCore=1 TmpDisk=0 Weight=1\n",
        "   Reason=Not responding [slurm@2024-01-15T03:25:00]\n",
        "gpu[01-02]     1    gpu*   mix*   128  2:32:2 1031000  0  1  a100  Not responding\n",
        "[2024-01-15T03:25:00.117] error: Nodes gpu-node-07 not responding, setting DOWN\n",
        "[2024-01-15T03:20:00.001] error: Nodes gpu[03-04] not responding\n",
    ],
)
def test_states_and_reasons_of_a_node_slurm_lost(text: str) -> None:
    assert SIG in {m.id for m in match(text)}


@pytest.mark.parametrize(
    "text",
    [
        "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\n"
        "main*        up   infinite     20   idle compute[001-020]\n",
        "   State=DOWN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A\n   Reason=undraining\n",
        "   State=IDLE+DRAIN ThreadsPerCore=2\n   Reason=maintenance [root@2024-01-15T03:25:00]\n",
        "Node gpu-node-07 now responding\n",
    ],
)
def test_not_taken_for_a_lost_node(text: str) -> None:
    assert SIG not in {m.id for m in match(text)}
